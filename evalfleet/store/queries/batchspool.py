"""The spool of batch-mode jobs and the record of batches, in the verdict store
(used by workers/batchjudge; read by `evalfleet status`).

Rows name a verdict by its key's digest (also the batch line's ``custom_id``). A spooled
job's claim passes to :data:`BATCH_OWNER` with no expiry, so no worker takes the key
while the job waits for its batch or for the batch's answer; the collector's save
releases it like any worker's.

A batch row is written, and its lines bound to it, in the same transaction before
anything is sent (``preparing``); it turns ``open`` once the provider's batch id is
recorded, ``done`` once collected or given back. So a submitter killed between any two
steps leaves a ``preparing`` row whose lines are known, and the next submitter finds
its batch again (by the batch's metadata) or creates it: nothing lost, nothing sent
twice.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, insert, select, update

from evalfleet.store.base import DeadLetter
from evalfleet.store.schema import claims, judge_batch_spool, judge_batches
from evalfleet.store.sql import SqlStore

#: Who holds the claims of spooled and submitted jobs.
BATCH_OWNER = "judge-batch"

#: When a spooled job's claim expires: never, in practice.
HELD_UNTIL = datetime(9999, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class SpoolEntry:
    """One batch-mode job on its way to the spool."""

    key: str
    """Its verdict key's digest."""
    judge_model: str
    metric: str
    job: dict[str, Any]
    """The job, as a message carries it (``encode_job``)."""
    body: dict[str, Any]
    """The chat completion request, as the worker rendered it."""


#: A batch's estimated cost per metric from its lines (metric, request body).
Estimate = Callable[[Sequence[tuple[str, dict[str, Any]]]], dict[str, float]]


@dataclass(frozen=True)
class Gathered:
    """The lines bound to a new batch, and their estimated cost per metric."""

    lines: list[tuple[str, dict[str, Any]]]
    costs: dict[str, float]


@dataclass(frozen=True)
class BatchRow:
    """One batch as the store records it."""

    id: str
    judge_model: str
    state: str
    provider_id: str | None
    input_file_id: str | None
    status: str | None
    requests: int
    completed: int
    failed: int
    estimated_cost_usd: float | None
    cost_usd: float
    saved_usd: float
    created_at: datetime


@dataclass(frozen=True)
class SpoolSummary:
    """What ``evalfleet status`` shows of batch judging."""

    waiting: int
    """Jobs spooled and not yet in a batch."""
    in_batches: int
    """Jobs carried by open or preparing batches."""
    oldest_spooled_at: datetime | None
    """When the oldest unfinished batch-mode job was spooled."""
    open_batches: list[BatchRow]


class BatchSpool:
    """The spool and the batch record over one SQL verdict store."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store

    def put(self, entries: Sequence[SpoolEntry], *, owner: str, now: datetime) -> None:
        """Spool jobs whose keys ``owner`` holds, and pass their claims to the batch
        owner with no expiry, in one transaction.

        Raises:
            StoreUnavailable: The database cannot be reached (nothing was spooled).
        """
        if not entries:
            return
        rows = [{"key": e.key, "judge_model": e.judge_model, "metric": e.metric,
                 "job": json.dumps(e.job), "body": json.dumps(e.body),
                 "body_bytes": _line_bytes(e.key, e.body),
                 "spooled_at": now, "not_before": now, "batch": None} for e in entries]
        # A row still there is a job its batch sent back (a failed line) whose collector
        # has not dropped the row yet, or a cascade's job going on to its next batch tier
        # (another model): the job's new copy takes it over, out of that batch.
        spool = self.store.insert(judge_batch_spool)
        upsert = spool.on_conflict_do_update(
            index_elements=[judge_batch_spool.c.key],
            set_={name: spool.excluded[name] for name in
                  ("judge_model", "job", "body", "body_bytes", "spooled_at", "not_before",
                   "batch")})
        with self.store.begin() as conn:
            conn.execute(upsert, rows)
            conn.execute(update(claims).where(claims.c.key.in_([e.key for e in entries]),
                                              claims.c.owner == owner)
                         .values(owner=BATCH_OWNER, expires_at=HELD_UNTIL))

    def waiting_models(self, *, now: datetime) -> list[str]:
        """Judge models with spooled jobs due for a batch."""
        with self.store.connect() as conn:
            return list(conn.execute(
                select(judge_batch_spool.c.judge_model).distinct()
                .where(judge_batch_spool.c.batch.is_(None),
                       judge_batch_spool.c.not_before <= now)).scalars())

    def gather(self, batch_id: str, *, judge_model: str, max_requests: int, max_bytes: int,
               max_wait_s: float, now: datetime,
               estimate: Estimate | None = None) -> Gathered:
        """Bind the oldest due jobs of one model to a new ``preparing`` batch, when there
        are ``max_requests`` of them or the oldest has waited ``max_wait_s``.

        Args:
            batch_id: The new batch's local id (sent as its metadata).
            judge_model: The one model of the batch file.
            max_requests: Lines per batch at most.
            max_bytes: Bytes per batch file at most.
            max_wait_s: How long the oldest job may wait for a full batch.
            now: The time.
            estimate: The estimated cost of each line (metric, request body), per metric.

        Returns:
            The lines, oldest first (none when it is not time), and their estimated cost
            per metric.
        """
        with self.store.begin() as conn:
            rows = conn.execute(
                select(judge_batch_spool.c.key, judge_batch_spool.c.body,
                       judge_batch_spool.c.body_bytes, judge_batch_spool.c.spooled_at,
                       judge_batch_spool.c.metric)
                .where(judge_batch_spool.c.judge_model == judge_model,
                       judge_batch_spool.c.batch.is_(None),
                       judge_batch_spool.c.not_before <= now,
                       judge_batch_spool.c.body_bytes <= max_bytes)  # see oversize()
                .order_by(judge_batch_spool.c.spooled_at, judge_batch_spool.c.key)
                .limit(max_requests).with_for_update(skip_locked=True)).all()
            lines: list[tuple[str, dict[str, Any]]] = []
            metrics: list[str] = []
            size = 0
            for key, body, body_bytes, _, metric in rows:
                if lines and size + body_bytes > max_bytes:
                    break
                lines.append((key, json.loads(body)))
                metrics.append(metric)
                size += body_bytes
            full = len(lines) < len(rows) or len(lines) >= max_requests
            if not lines or (not full and _utc(rows[0].spooled_at)
                             > now - timedelta(seconds=max_wait_s)):
                return Gathered([], {})
            costs = estimate(list(zip(metrics, (body for _, body in lines), strict=True))
                             ) if estimate else {}
            conn.execute(insert(judge_batches).values(
                id=batch_id, judge_model=judge_model, state="preparing", requests=len(lines),
                created_at=now, estimated_cost_usd=sum(costs.values()) if costs else None))
            conn.execute(update(judge_batch_spool)
                         .where(judge_batch_spool.c.key.in_([key for key, _ in lines]))
                         .values(batch=batch_id))
        return Gathered(lines, costs)

    def oversize(self, *, judge_model: str, max_bytes: int,
                 ) -> list[tuple[str, dict[str, Any], int]]:
        """Waiting jobs whose line alone is over ``max_bytes``: no batch file can carry
        them, and :meth:`gather` never binds them.

        Returns:
            Each one's custom id, job and line size in bytes.
        """
        with self.store.connect() as conn:
            return [(key, json.loads(job), size) for key, job, size in conn.execute(
                select(judge_batch_spool.c.key, judge_batch_spool.c.job,
                       judge_batch_spool.c.body_bytes)
                .where(judge_batch_spool.c.judge_model == judge_model,
                       judge_batch_spool.c.batch.is_(None),
                       judge_batch_spool.c.body_bytes > max_bytes))]

    def dead_letter(self, letters: Sequence[DeadLetter]) -> None:
        """Store dead letters of waiting jobs (each under its verdict key's digest), drop
        their spool rows and the batch's claims on them, in one transaction."""
        keys = [letter.verdict_key for letter in letters if letter.verdict_key is not None]
        if not keys:
            return
        with self.store.begin() as conn:
            self.store.save_rows(conn, [], list(letters), release=keys, owner=BATCH_OWNER)
            conn.execute(delete(judge_batch_spool).where(judge_batch_spool.c.key.in_(keys),
                                                         judge_batch_spool.c.batch.is_(None)))

    def lines(self, batch_id: str) -> list[tuple[str, dict[str, Any]]]:
        """The lines bound to a batch (custom id, request body), in a stable order."""
        with self.store.connect() as conn:
            return [(key, json.loads(body)) for key, body in conn.execute(
                select(judge_batch_spool.c.key, judge_batch_spool.c.body)
                .where(judge_batch_spool.c.batch == batch_id)
                .order_by(judge_batch_spool.c.spooled_at, judge_batch_spool.c.key))]

    def jobs(self, batch_id: str) -> dict[str, dict[str, Any]]:
        """The jobs a batch carries, by custom id."""
        with self.store.connect() as conn:
            return {key: json.loads(job) for key, job in conn.execute(
                select(judge_batch_spool.c.key, judge_batch_spool.c.job)
                .where(judge_batch_spool.c.batch == batch_id))}

    def batches(self, *states: str) -> list[BatchRow]:
        """The batches in any of ``states``, oldest first."""
        with self.store.connect() as conn:
            return [BatchRow(**{**row._mapping, "created_at": _utc(row.created_at)})
                    for row in conn.execute(
                select(*(judge_batches.c[name] for name in BatchRow.__dataclass_fields__))
                .where(judge_batches.c.state.in_(states))
                .order_by(judge_batches.c.created_at, judge_batches.c.id))]

    def record_file(self, batch_id: str, file_id: str) -> None:
        """Note the uploaded input file of a ``preparing`` batch."""
        self._update(batch_id, input_file_id=file_id)

    def record_created(self, batch_id: str, provider_batch: dict[str, Any]) -> None:
        """Note the provider's batch: the batch is ``open``."""
        self._update(batch_id, state="open", provider_id=str(provider_batch["id"]),
                     input_file_id=provider_batch.get("input_file_id"),
                     status=provider_batch.get("status"))

    def record_progress(self, batch_id: str, provider_batch: dict[str, Any]) -> None:
        """Note an open batch's status and request counts."""
        counts = provider_batch.get("request_counts") or {}
        self._update(batch_id, status=provider_batch.get("status"),
                     completed=_count(counts.get("completed")),
                     failed=_count(counts.get("failed")))

    def saved(self) -> tuple[float, float]:
        """Every batch's verdict cost and what batching saved, in US dollars."""
        with self.store.connect() as conn:
            cost, saved = conn.execute(select(func.coalesce(func.sum(judge_batches.c.cost_usd), 0),
                                              func.coalesce(func.sum(judge_batches.c.saved_usd), 0))
                                       ).one()
        return float(cost), float(saved)

    def settle(self, batch_id: str, keys: Sequence[str], *, now: datetime,
               cost_usd: float = 0.0, saved_usd: float = 0.0) -> None:
        """Drop the spool rows of jobs that now have an outcome, and any claim the batch
        still holds on them, and add what their lines cost at the batch price and what
        that saved; once no row is left the batch is ``done``. One transaction, so a
        chunk's cost is added exactly when its rows go."""
        with self.store.begin() as conn:
            if cost_usd or saved_usd:
                conn.execute(update(judge_batches).where(judge_batches.c.id == batch_id).values(
                    cost_usd=judge_batches.c.cost_usd + cost_usd,
                    saved_usd=judge_batches.c.saved_usd + saved_usd))
            if keys:
                dropped = list(conn.execute(delete(judge_batch_spool).where(
                    judge_batch_spool.c.key.in_(list(keys)),
                    judge_batch_spool.c.batch == batch_id).returning(
                        judge_batch_spool.c.key)).scalars())
                if dropped:
                    conn.execute(delete(claims).where(claims.c.key.in_(dropped),
                                                      claims.c.owner == BATCH_OWNER))
            left = conn.execute(select(func.count()).select_from(judge_batch_spool)
                                .where(judge_batch_spool.c.batch == batch_id)).scalar_one()
            if not left:
                conn.execute(update(judge_batches).where(judge_batches.c.id == batch_id)
                             .values(state="done", finished_at=now))

    def give_back(self, batch_id: str, *, not_before: datetime, status: str,
                  now: datetime) -> int:
        """A batch that failed without running: its jobs wait for a later batch (no
        attempt counted), from ``not_before``; the batch is ``done``.

        Returns:
            How many jobs went back to the spool.
        """
        with self.store.begin() as conn:
            moved = conn.execute(update(judge_batch_spool)
                                 .where(judge_batch_spool.c.batch == batch_id)
                                 .values(batch=None, not_before=not_before)).rowcount
            conn.execute(update(judge_batches).where(judge_batches.c.id == batch_id)
                         .values(state="done", status=status, finished_at=now))
        return int(moved or 0)

    def summary(self) -> SpoolSummary:
        """Waiting jobs, jobs in batches, the oldest unfinished job, the open batches."""
        spool = judge_batch_spool.c
        with self.store.connect() as conn:
            waiting, in_batches, oldest = conn.execute(select(
                func.count().filter(spool.batch.is_(None)),
                func.count().filter(spool.batch.is_not(None)),
                func.min(spool.spooled_at))).one()
        return SpoolSummary(int(waiting), int(in_batches), _utc(oldest) if oldest else None,
                            self.batches("preparing", "open"))

    def _update(self, batch_id: str, **values: Any) -> None:
        with self.store.begin() as conn:
            conn.execute(update(judge_batches).where(judge_batches.c.id == batch_id)
                         .values(**values))


def batch_line(custom_id: str, body: dict[str, Any], *,
               url: str = "/v1/chat/completions") -> bytes:
    """One line of a batch input file (ASCII: any text, lone surrogates included, is
    written as escapes); ``url`` is the provider's name for the chat endpoint."""
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body},
                      separators=(",", ":")).encode() + b"\n"


def _line_bytes(custom_id: str, body: dict[str, Any]) -> int:
    return len(batch_line(custom_id, body))


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
