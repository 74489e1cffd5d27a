"""Carrying out the retention policy in small transactions (``evalfleet purge``).

On a partitioned Postgres store (``evalfleet.store.partitions``) the days wholly past
the verdicts' retention go first, a day's partitions of verdicts, scores and samples
dropped together in one short transaction (their rows counted per metric first,
through the (metric, created_at) index). What is left before the cut-off (the day at
the boundary, the default partition, the legacy partition until it is wholly past)
is trimmed row by row as below, and so is everything on SQLite.

Each task walks one metric at a time along the (metric, created_at) index of
``verdicts``, ``batch_rows`` verdicts per transaction, from a cursor on
``created_at``, so no transaction holds many row locks or runs long, and no batch
re-reads what an earlier one handled:

- deleting verdicts, with their scores and kept samples (found through their primary
  keys, bounded on the partition key), and their keys in ``verdict_keys``;
- emptying raw outputs and error texts, from where the last run stopped (kept per
  metric in ``retention_marks``) to this run's cut-off.

A run that stops half-way (crash, Ctrl-C) loses nothing: every committed batch is
complete, and the next run carries on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, func, or_, select, text, update
from sqlalchemy.engine import Connection

from evalfleet.ops.retention import Cutoffs, RetentionPolicy, raw_output_range
from evalfleet.store.base import VerdictKey
from evalfleet.store.partitions import (
    LEGACY_SUFFIX,
    drop_partition,
    expired,
    is_partitioned,
    list_partitions,
)
from evalfleet.store.schema import (
    retention_marks,
    verdict_keys,
    verdict_samples,
    verdict_scores,
    verdicts,
)
from evalfleet.store.sql import SqlStore, to_utc

#: Verdicts per transaction.
PURGE_BATCH_ROWS = 10_000

_KEY_COLUMNS = (verdicts.c.sample_id, verdicts.c.metric, verdicts.c.prompt_version,
                verdicts.c.judge_model)

#: The ``retention_marks`` task of raw-output emptying.
RAW_OUTPUT_TASK = "raw_output"

#: The task name of verdict deletion (in progress callbacks; it needs no mark).
VERDICTS_TASK = "verdicts"

#: Distinct metrics of ``verdicts`` by walking its (metric, created_at) index, one
#: lookup per metric instead of a scan of the table (Postgres and SQLite alike).
_METRICS_SQL = text(
    "WITH RECURSIVE m(metric) AS ("
    " SELECT min(metric) FROM verdicts"
    " UNION ALL"
    " SELECT (SELECT min(v.metric) FROM verdicts v WHERE v.metric > m.metric)"
    " FROM m WHERE m.metric IS NOT NULL"
    ") SELECT metric FROM m WHERE metric IS NOT NULL",
)


@dataclass
class PurgeReport:
    """What a purge did (in a dry run: would do), per metric."""

    cutoffs: Cutoffs
    dry_run: bool
    verdicts_deleted: dict[str, int] = field(default_factory=dict)
    raw_outputs_emptied: dict[str, int] = field(default_factory=dict)
    partitions_dropped: list[str] = field(default_factory=list)
    """Suffixes of the days (``pYYYYMMDD``, ``legacy``) dropped whole (Postgres)."""
    transactions: int = 0
    elapsed_s: float = 0.0


class Purger:
    """Applies a retention policy to a verdict store."""

    def __init__(self, store: SqlStore, policy: RetentionPolicy, *,
                 batch_rows: int = PURGE_BATCH_ROWS,
                 on_batch: Callable[[str, str, int], None] | None = None) -> None:
        """Purge ``store`` by ``policy``.

        Args:
            store: The verdict store.
            policy: The retention policy.
            batch_rows: Verdicts per transaction.
            on_batch: Called after each committed batch with (task, metric, rows).
        """
        self.store = store
        self.policy = policy
        self.batch_rows = batch_rows
        self._on_batch = on_batch

    def run(self, *, now: datetime, dry_run: bool = False) -> PurgeReport:
        """Delete old verdicts, then empty old raw outputs, metric by metric.

        Args:
            now: The time the cut-offs count back from.
            dry_run: Count what would go; change nothing.

        Returns:
            The counts.
        """
        started = time.perf_counter()
        report = PurgeReport(self.policy.cutoffs(now=to_utc(now)), dry_run=dry_run)
        if not self.policy.keeps_everything:
            before = report.cutoffs.verdicts_before
            with self.store.connect() as conn:
                partitioned = is_partitioned(conn)
            if partitioned and before is not None:
                self._drop_partitions(before, report)
            for metric in self.metrics():
                self._purge_metric(metric, report)
        report.elapsed_s = time.perf_counter() - started
        return report

    def metrics(self) -> list[str]:
        """The metrics that have verdicts."""
        with self.store.connect() as conn:
            return [row[0] for row in conn.execute(_METRICS_SQL)]

    def _purge_metric(self, metric: str, report: PurgeReport) -> None:
        cutoffs = report.cutoffs
        if cutoffs.verdicts_before is not None:
            report.verdicts_deleted[metric] = report.verdicts_deleted.get(metric, 0) + (
                self._count(_old(metric, None, cutoffs.verdicts_before)) if report.dry_run
                else self._delete_verdicts(metric, cutoffs.verdicts_before, report))
        span = raw_output_range(cutoffs, done_until=self._done_until(metric))
        if span is not None:
            condition = and_(_old(metric, *span), _has_raw_output())
            report.raw_outputs_emptied[metric] = (
                self._count(condition) if report.dry_run
                else self._empty_raw_outputs(metric, span, report))

    def _drop_partitions(self, before: datetime, report: PurgeReport) -> None:
        """Count then drop each day of verdicts, scores and samples wholly before ``before``
        (a dry run only lists them: its row counts cover every verdict to go)."""
        with self.store.connect() as conn:
            days = expired(list_partitions(conn, "verdicts"), before=before)
        report.partitions_dropped.extend(day.suffix for day in days)
        if report.dry_run:
            return
        for day in days:
            with self.store.begin() as conn:
                counts = conn.execute(text(
                    f"SELECT metric, count(*) FROM {day.name} GROUP BY metric")).all()
                _delete_keys_between(conn, day.start, day.end)
                drop_partition(conn, day.suffix)
            report.transactions += 1
            for metric, n in counts:
                report.verdicts_deleted[metric] = report.verdicts_deleted.get(metric, 0) + n
            if self._on_batch is not None:
                self._on_batch(VERDICTS_TASK, day.suffix, sum(n for _, n in counts))

    def _count(self, condition: ColumnElement[bool]) -> int:
        with self.store.connect() as conn:
            return int(conn.execute(select(func.count()).where(condition)).scalar_one())

    def _delete_verdicts(self, metric: str, before: datetime, report: PurgeReport) -> int:
        with self.store.connect() as conn:
            partitioned = is_partitioned(conn)
            # Scores stored before partitioning carry a time just under this bound.
            legacy_end = next((p.end for p in list_partitions(conn, "verdicts")
                               if p.suffix == LEGACY_SUFFIX), None) if partitioned else None

        def step(conn: Connection, cursor: datetime | None) -> list[datetime]:
            gone = conn.execute(
                select(verdicts.c.id, verdicts.c.created_at, *_KEY_COLUMNS)
                .where(_old(metric, cursor, before)).order_by(verdicts.c.created_at)
                .limit(self.batch_rows)).all()
            if gone:
                # Scores before their verdicts: the rollups' trigger reads a deleted
                # score's segment from its verdict (evalfleet.store.rollup).
                moments = [(int(row[0]), to_utc(row[1])) for row in gone]
                _delete_dependents(conn, moments, legacy_end=legacy_end)
                conn.execute(delete(verdicts).where(
                    verdicts.c.id.in_([row[0] for row in moments]),
                    verdicts.c.created_at >= min(m for _, m in moments),
                    verdicts.c.created_at <= max(m for _, m in moments)))
            if gone and partitioned:
                digests = [VerdictKey(*row[2:]).digest() for row in gone]
                conn.execute(delete(verdict_keys).where(verdict_keys.c.digest.in_(digests)))
            return [to_utc(row[1]) for row in gone]

        return self._walk(VERDICTS_TASK, metric, step, report)

    def _empty_raw_outputs(self, metric: str, span: tuple[datetime | None, datetime],
                           report: PurgeReport) -> int:
        start, end = span

        def step(conn: Connection, cursor: datetime | None) -> list[datetime]:
            batch = self._batch_ids(and_(_old(metric, cursor or start, end), _has_raw_output()))
            statement = (update(verdicts).where(verdicts.c.id.in_(batch))
                         .values(raw_output=None, error=None).returning(verdicts.c.created_at))
            moments = list(conn.execute(statement).scalars())
            done_until = end if len(moments) < self.batch_rows else max(map(to_utc, moments))
            self._mark(conn, metric, done_until)
            return moments

        return self._walk(RAW_OUTPUT_TASK, metric, step, report)

    def _walk(self, task: str, metric: str,
              step: Callable[[Connection, datetime | None], list[datetime]],
              report: PurgeReport) -> int:
        """Run ``step`` batch by batch, each in its own transaction, moving the cursor on."""
        total, cursor = 0, None
        while True:
            with self.store.begin() as conn:
                moments = step(conn, cursor)
            report.transactions += 1
            total += len(moments)
            if self._on_batch is not None:
                self._on_batch(task, metric, len(moments))
            if len(moments) < self.batch_rows:
                return total
            cursor = max(map(to_utc, moments))

    def _batch_ids(self, condition: ColumnElement[bool]) -> Any:
        # Oldest first along (metric, created_at): LIMIT stops the index scan early.
        return (select(verdicts.c.id).where(condition).order_by(verdicts.c.created_at)
                .limit(self.batch_rows).scalar_subquery())

    def _done_until(self, metric: str) -> datetime | None:
        m = retention_marks.c
        with self.store.connect() as conn:
            found = conn.execute(select(m.done_until).where(
                m.task == RAW_OUTPUT_TASK, m.metric == metric)).scalar_one_or_none()
        return None if found is None else to_utc(found)

    def _mark(self, conn: Connection, metric: str, done_until: datetime) -> None:
        m = retention_marks.c
        upsert = self.store.insert(retention_marks).values(
            task=RAW_OUTPUT_TASK, metric=metric, done_until=to_utc(done_until),
        ).on_conflict_do_update(index_elements=[m.task, m.metric],
                                set_={"done_until": to_utc(done_until)})
        conn.execute(upsert)


def _old(metric: str, start: datetime | None, end: datetime) -> ColumnElement[bool]:
    """Verdicts of ``metric`` created in ``[start, end)`` (from the beginning when None)."""
    v = verdicts.c
    conditions = [v.metric == metric, v.created_at < to_utc(end)]
    if start is not None:
        conditions.append(v.created_at >= to_utc(start))
    return and_(*conditions)


def _has_raw_output() -> ColumnElement[bool]:
    v = verdicts.c
    return or_(v.raw_output.is_not(None), v.error.is_not(None))


def _delete_dependents(conn: Connection, gone: Sequence[tuple[int, datetime]], *,
                       legacy_end: datetime | None) -> None:
    """Delete the scores and kept samples of the verdicts ``gone`` (id, created_at), which
    ``ON DELETE CASCADE`` does on SQLite alone.

    Both live in partitions of the same bounds as their verdicts; bounding
    ``created_at`` to the batch's span keeps Postgres to those partitions. Scores
    stored before partitioning carry a constant time just under the legacy bound.
    """
    ids = [row[0] for row in gone]
    moments = [row[1] for row in gone]
    low, high = min(moments), max(moments)
    score_high = high
    if legacy_end is not None and low < legacy_end:
        score_high = max(high, legacy_end)
    vs, ks = verdict_scores.c, verdict_samples.c
    conn.execute(delete(verdict_scores).where(
        vs.verdict_id.in_(ids), vs.created_at >= low, vs.created_at <= score_high))
    conn.execute(delete(verdict_samples).where(
        ks.verdict_id.in_(ids), ks.created_at >= low, ks.created_at <= high))


def _delete_keys_between(conn: Connection, start: datetime | None, end: datetime | None) -> None:
    """Delete the key digests of the verdicts created in ``[start, end)`` (a partition's)."""
    k = verdict_keys.c
    conditions = [k.created_at >= start] if start is not None else []
    if end is not None:
        conditions.append(k.created_at < end)
    conn.execute(delete(verdict_keys).where(*conditions))
