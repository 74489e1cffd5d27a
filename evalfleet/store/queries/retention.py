"""The verdict store's side of retention (``evalfleet.ops.purger`` walks it): each
method below is one short transaction, or one read.

Verdicts are found along the (metric, created_at) index of ``verdicts``, oldest first,
from a cursor on ``created_at``, so no batch re-reads what an earlier one handled and
LIMIT stops the index scan early. On a partitioned Postgres store
(``evalfleet.store.partitions``) a day wholly past the cut-off is dropped whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, func, or_, select, text, update
from sqlalchemy.engine import Connection

from evalfleet.store.base import VerdictKey
from evalfleet.store.partitions import (
    LEGACY_SUFFIX,
    Partition,
    drop_partition,
    expired,
    is_partitioned,
    list_partitions,
)
from evalfleet.store.queries.evidence import purge_samples
from evalfleet.store.schema import (
    pending_finals,
    retention_marks,
    verdict_keys,
    verdict_samples,
    verdict_scores,
    verdicts,
)
from evalfleet.store.sql import SqlStore, to_utc

#: The ``retention_marks`` task of raw-output emptying.
RAW_OUTPUT_TASK = "raw_output"

_KEY_COLUMNS = (verdicts.c.sample_id, verdicts.c.metric, verdicts.c.prompt_version,
                verdicts.c.judge_model)

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


@dataclass(frozen=True)
class Layout:
    """How the verdicts are stored, which decides how they are deleted."""

    partitioned: bool
    legacy_end: datetime | None = None
    """End of the legacy partition (verdicts stored before partitioning), if any."""


class VerdictRetention:
    """Deleting old verdicts and emptying old raw outputs, one batch at a time."""

    def __init__(self, store: SqlStore, *, batch_rows: int) -> None:
        """Work on ``store``, ``batch_rows`` verdicts per transaction."""
        self.store = store
        self.batch_rows = batch_rows

    def metrics(self) -> list[str]:
        """The metrics that have verdicts."""
        with self.store.connect() as conn:
            return [row[0] for row in conn.execute(_METRICS_SQL)]

    def layout(self) -> Layout:
        """Whether the verdicts are partitioned, and where their legacy partition ends."""
        with self.store.connect() as conn:
            if not is_partitioned(conn):
                return Layout(partitioned=False)
            return Layout(partitioned=True, legacy_end=next(
                (p.end for p in list_partitions(conn, "verdicts")
                 if p.suffix == LEGACY_SUFFIX), None))

    def expired_days(self, before: datetime) -> list[Partition]:
        """The days of verdicts wholly before ``before`` (none when not partitioned)."""
        with self.store.connect() as conn:
            if not is_partitioned(conn):
                return []
            return expired(list_partitions(conn, "verdicts"), before=before)

    def drop_day(self, day: Partition) -> list[tuple[str, int]]:
        """Drop a day's partitions of verdicts, scores and samples and its key digests.

        Returns:
            The verdicts it held, per metric.
        """
        with self.store.begin() as conn:
            counts = conn.execute(text(
                f"SELECT metric, count(*) FROM {day.name} GROUP BY metric")).all()
            _delete_keys_between(conn, day.start, day.end)
            drop_partition(conn, day.suffix)
        return [(metric, int(n)) for metric, n in counts]

    def count_verdicts(self, metric: str, *, before: datetime) -> int:
        """Verdicts of ``metric`` created before ``before``."""
        return self._count(_old(metric, None, before))

    def count_raw_outputs(self, metric: str, start: datetime | None, end: datetime) -> int:
        """Verdicts of ``metric`` created in ``[start, end)`` that keep a raw output or an
        error text."""
        return self._count(and_(_old(metric, start, end), _has_raw_output()))

    def delete_verdicts(self, metric: str, *, after: datetime | None, before: datetime,
                        layout: Layout) -> list[datetime]:
        """Delete the oldest batch of ``metric``'s verdicts created in ``[after, before)``
        with their scores, kept samples and key digests.

        Returns:
            The creation times of the verdicts deleted.
        """
        with self.store.begin() as conn:
            gone = conn.execute(
                select(verdicts.c.id, verdicts.c.created_at, *_KEY_COLUMNS)
                .where(_old(metric, after, before)).order_by(verdicts.c.created_at)
                .limit(self.batch_rows)).all()
            if gone:
                # Scores before their verdicts: the rollups' trigger reads a deleted
                # score's segment from its verdict (evalfleet.store.rollup).
                moments = [(int(row[0]), to_utc(row[1])) for row in gone]
                _delete_dependents(conn, moments, legacy_end=layout.legacy_end)
                conn.execute(delete(verdicts).where(
                    verdicts.c.id.in_([row[0] for row in moments]),
                    verdicts.c.created_at >= min(m for _, m in moments),
                    verdicts.c.created_at <= max(m for _, m in moments)))
            if gone and layout.partitioned:
                digests = [VerdictKey(*row[2:]).digest() for row in gone]
                conn.execute(delete(verdict_keys).where(verdict_keys.c.digest.in_(digests)))
        return [to_utc(row[1]) for row in gone]

    def empty_raw_outputs(self, metric: str, start: datetime | None,
                          end: datetime) -> list[datetime]:
        """Empty the raw output and error text of the oldest batch of ``metric``'s verdicts
        created in ``[start, end)`` and mark how far the emptying got.

        Returns:
            The creation times of the verdicts emptied.
        """
        batch = (select(verdicts.c.id)
                 .where(and_(_old(metric, start, end), _has_raw_output()))
                 .order_by(verdicts.c.created_at).limit(self.batch_rows).scalar_subquery())
        statement = (update(verdicts).where(verdicts.c.id.in_(batch))
                     .values(raw_output=None, error=None).returning(verdicts.c.created_at))
        with self.store.begin() as conn:
            moments = [to_utc(moment) for moment in conn.execute(statement).scalars()]
            done_until = end if len(moments) < self.batch_rows else max(moments)
            self._mark(conn, metric, done_until)
        return moments

    def raw_outputs_done_until(self, metric: str) -> datetime | None:
        """Where the last run's raw-output emptying of ``metric`` stopped."""
        m = retention_marks.c
        with self.store.connect() as conn:
            found = conn.execute(select(m.done_until).where(
                m.task == RAW_OUTPUT_TASK, m.metric == metric)).scalar_one_or_none()
        return None if found is None else to_utc(found)

    def purge_samples(self, *, before: datetime, dry_run: bool = False) -> tuple[int, int]:
        """Delete the kept samples of verdicts created before ``before`` (the verdicts
        stay): see :func:`evalfleet.store.queries.evidence.purge_samples`.

        Returns:
            ``(rows deleted or to delete, transactions)``.
        """
        return purge_samples(self.store.engine, before=before, batch_rows=self.batch_rows,
                             dry_run=dry_run)

    def forget_pending_finals(self, *, before: datetime, dry_run: bool = False) -> int:
        """Forget the session versions noted final before ``before`` whose verdict never
        came (their job ended as a dead letter, or was never judged): a key is noted only
        until its verdict is saved, so an old one is a mark nothing will ever clear.

        Returns:
            The keys forgotten (in a dry run: that would be).
        """
        old = pending_finals.c.created_at < to_utc(before)
        if dry_run:
            with self.store.connect() as conn:
                return int(conn.execute(
                    select(func.count()).select_from(pending_finals).where(old)).scalar_one())
        with self.store.begin() as conn:
            return int(conn.execute(delete(pending_finals).where(old)).rowcount)

    def _count(self, condition: ColumnElement[bool]) -> int:
        with self.store.connect() as conn:
            return int(conn.execute(select(func.count()).where(condition)).scalar_one())

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
    conditions: list[Any] = [k.created_at >= start] if start is not None else []
    if end is not None:
        conditions.append(k.created_at < end)
    conn.execute(delete(verdict_keys).where(*conditions))
