"""The evidence behind verdicts: the sample each one judged, the lowest scores of a
window, a segment's scores of a range and its histogram (the alert page's).

Sample content lives in ``verdict_samples``, one row per verdict, apart from the
verdict so verdict rows stay small and ``EVALFLEET_SAMPLE_RETENTION_DAYS`` can purge
it alone. The reads here serve alert notifications, ``evalfleet alerts show`` and
the web page, on Postgres and SQLite alike (SQLAlchemy's JSON operators).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Engine,
    Select,
    Text,
    and_,
    cast,
    delete,
    func,
    select,
    text,
    true,
    type_coerce,
    union_all,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Connection

from evalfleet.store.dialect import is_sqlite, jit_off
from evalfleet.store.partitions import (
    created_since,
    drop_partition,
    expired,
    is_partitioned,
    list_partitions,
)
from evalfleet.store.queries.segment_minutes import (
    MinuteLevel,
    Range,
    WorstRead,
    histogram,
    minute_ranges,
    unbinned,
    whole_minutes,
    worst_minutes,
)
from evalfleet.store.rollup import value_bin
from evalfleet.store.schema import score_rollups, verdict_samples, verdict_scores, verdicts
from evalfleet.store.sql import to_utc

#: The parts of a sample kept as evidence (its id, time and attributes are on the verdict).
SAMPLE_PARTS = ("input", "output", "context", "reference", "fields")

#: Sample rows deleted per transaction by :func:`purge_samples`.
PURGE_BATCH_ROWS = 10_000


@dataclass(frozen=True)
class Evidence:
    """One scored sample of a window: what was judged, the score, and why."""

    verdict_id: int
    """The verdict's row id (its page)."""
    sample_id: str
    """The sample's id."""
    value: float
    """The score."""
    reason: str | None
    """The judge's explanation, verbatim (hostile text: escape where shown)."""
    sample_ts: datetime
    """When the sample happened."""
    attributes: dict[str, str]
    """The sample's attributes."""
    sample: dict[str, Any] | None
    """Input, output, context, reference and fields; None when not kept or purged."""
    failed_step: int | None = None
    """The trajectory step (from 1) the judge named as where things went wrong."""


def sample_content(sample: Mapping[str, Any]) -> dict[str, Any]:
    """The evidence part of a sample's JSON (see :data:`SAMPLE_PARTS`), and its
    ``trajectory`` and ``session`` when it has them."""
    content = {part: sample.get(part) for part in SAMPLE_PARTS}
    for part in ("trajectory", "session"):
        if sample.get(part) is not None:
            content[part] = sample[part]
    return content


def load_samples(conn: Connection, verdict_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """The kept samples of these verdicts, by verdict id (missing: none kept)."""
    if not verdict_ids:
        return {}
    query = select(verdict_samples.c.verdict_id, verdict_samples.c.sample).where(
        verdict_samples.c.verdict_id.in_(list(verdict_ids)))
    return {row[0]: row[1] for row in conn.execute(query)}


def attributes_match(labels: Mapping[str, str],
                     filters: Mapping[str, Sequence[str]] = {}, *,
                     containment: bool = False,
                     attributes: Any = verdicts.c.attributes) -> list[ColumnElement[bool]]:
    """Conditions on ``attributes`` (``verdicts.attributes`` unless told): each label
    equal, each filter one of its values.

    With ``containment`` (Postgres) the labels are one ``attributes @> {...}`` test, which
    the GIN index ``ix_verdicts_attributes`` answers.
    """
    if containment and labels:
        conditions = [type_coerce(attributes, JSONB).contains(dict(labels))]
    else:
        conditions = [attributes[key].as_string() == value for key, value in labels.items()]
    conditions += [attributes[key].as_string().in_(list(values))
                   for key, values in filters.items()]
    return conditions


def segment_keys(conn: Connection, *, metric: str, score: str, start: datetime,
                 end: datetime, labels: Mapping[str, str],
                 filters: Mapping[str, Sequence[str]] = {}) -> list[str]:
    """The attribute sets (as the rollups' ``segment_key``) of the segment's scores with
    sample times in ``[start, end)``, from the minute rollups over that range.

    Every stored score has its minute's rollup row (``evalfleet.store.rollup``: kept in
    the transaction that writes it), so the list holds every set the range's scores
    have, and perhaps a few more from the minutes at its ends.
    """
    r = score_rollups.c
    first = datetime.fromtimestamp(to_utc(start).timestamp() // 60 * 60, UTC)
    rows = conn.execute(
        select(r.segment_key).distinct()
        .where(r.metric == metric, r.name == score, r.span_s == 60, r.bucket >= first,
               r.bucket < to_utc(end),
               *attributes_match(labels, filters, containment=not is_sqlite(conn),
                                 attributes=r.attributes)))
    return sorted(row[0] for row in rows)


def segment_condition(conn: Connection, *, metric: str, score: str, start: datetime,
                      end: datetime, labels: Mapping[str, str],
                      filters: Mapping[str, Sequence[str]] = {}
                      ) -> list[ColumnElement[bool]] | None:
    """Conditions that pick the segment's verdicts of ``[start, end)`` out of ``verdicts``;
    None when it has none there.

    On Postgres: the verdict's attribute key is one of :func:`segment_keys`, so the index
    ``ix_verdicts_metric_segment_sample_ts`` reads each attribute set's range of sample
    time and nothing else (with the time range given on ``verdicts.sample_ts``). On
    SQLite: the attributes compared one by one, as before.
    """
    if is_sqlite(conn):
        return attributes_match(labels, filters)
    jit_off(conn)
    keys = segment_keys(conn, metric=metric, score=score, start=start, end=end,
                        labels=labels, filters=filters)
    if not keys:
        return None
    key = func.md5(cast(verdicts.c.attributes, Text))
    return [key.in_(keys) if len(keys) > 1 else key == keys[0]]


def lowest_scoring(
    conn: Connection, *, metric: str, score: str, start: datetime, end: datetime,
    labels: Mapping[str, str], filters: Mapping[str, Sequence[str]] = {}, limit: int = 5,
    highest: bool = False,
) -> list[Evidence]:
    """The samples of a segment's window with the lowest (or highest) scores.

    Only the minutes that can hold them are read (``segment_minutes.worst_minutes``,
    from the segment's minute rollups), and the partial minutes at the window's ends:
    at 1,000 samples a minute a window is 10,000 score rows, each read by key.

    Args:
        conn: A database connection.
        metric: The metric.
        score: The stored score.
        start: Window start (inclusive), on sample time.
        end: Window end (exclusive).
        labels: The segment's attributes.
        filters: The rule's attribute filters.
        limit: Most samples returned.
        highest: True for the highest scores (a rule on rising scores).

    Returns:
        Worst first (ties by sample time, then sample id: the same data lists the same
        samples however its verdicts were stored), with their reasons and kept samples.
    """
    vs, v = verdict_scores.c, verdicts.c
    segment = segment_condition(conn, metric=metric, score=score, start=start, end=end,
                                labels=labels, filters=filters)
    if segment is None:
        return []
    whole, ranges = whole_minutes(start, end)
    within: list[ColumnElement[bool]] = []
    if whole is not None:
        read = worst_minutes(
            minute_levels(conn, metric=metric, score=score, minutes=whole, labels=labels,
                          filters=filters), limit=limit, highest=highest)
        ranges += [whole] if read.minutes is None else minute_ranges(read.minutes)
        within = _within(read, score=score, highest=highest)
    if not ranges:
        return []
    found = union_all(*(
        select(v.id, v.sample_id, vs.value, v.reason, vs.sample_ts, v.attributes,
               v.failed_step)
        .select_from(verdict_scores.join(verdicts, v.id == vs.verdict_id))
        .where(*_in_window(metric=metric, score=score, start=low, end=high), *segment,
               *within)
        for low, high in ranges)).subquery()
    order = found.c.value.desc() if highest else found.c.value.asc()
    query = select(found).order_by(order, found.c.sample_ts, found.c.sample_id).limit(limit)
    return _evidence(conn, conn.execute(query).all())


def _within(read: WorstRead, *, score: str, highest: bool) -> list[ColumnElement[bool]]:
    """The bound ``read`` puts on the worst scores, as conditions on the score rows and
    on their verdicts.

    A production score row holds the value its verdict's ``scores`` holds (the store
    writes one from the other), so the bound is first tested on the verdict row, which
    the segment's index range reads anyway: only the few verdicts within it have their
    score row looked up, not every verdict of the minutes read. A series the verdict's
    ``scores`` does not hold (a canary's) passes that test and meets the score row's.
    """
    bound = read.bound
    if bound is None:
        return []

    def test(value: ColumnElement[float]) -> ColumnElement[bool]:
        if highest:
            return value >= bound if read.inclusive else value > bound
        return value <= bound if read.inclusive else value < bound

    copied = verdicts.c.scores[score].as_float()
    return [func.coalesce(test(copied), true()), test(verdict_scores.c.value)]


def _evidence(conn: Connection, rows: Sequence[Any]) -> list[Evidence]:
    """Evidence of rows ``(id, sample_id, value, reason, sample_ts, attributes,
    failed_step)``, in their order, with their kept samples."""
    samples = load_samples(conn, [row[0] for row in rows])
    return [
        Evidence(verdict_id=row[0], sample_id=row[1], value=float(row[2]), reason=row[3],
                 sample_ts=to_utc(row[4]), attributes=dict(row[5] or {}),
                 sample=samples.get(row[0]), failed_step=row[6])
        for row in rows
    ]


def minute_levels(conn: Connection, *, metric: str, score: str, minutes: Range,
                  labels: Mapping[str, str],
                  filters: Mapping[str, Sequence[str]] = {}) -> list[MinuteLevel]:
    """The segment's count per minute and level over the whole ``minutes``, from the
    minute rollups (their shards, judges and attribute sets summed); empty ones left out."""
    jit_off(conn)
    r = score_rollups.c
    low, high = minutes
    rows = conn.execute(
        select(r.bucket, r.level, func.sum(r.n))
        .where(r.metric == metric, r.name == score, r.span_s == 60,
               r.bucket >= to_utc(low), r.bucket < to_utc(high),
               *attributes_match(labels, filters, containment=not is_sqlite(conn),
                                 attributes=r.attributes))
        .group_by(r.bucket, r.level))
    return [MinuteLevel(to_utc(minute), int(level), int(n)) for minute, level, n in rows if n]


def segment_histogram(
    conn: Connection, *, metric: str, score: str, start: datetime, end: datetime,
    labels: Mapping[str, str], filters: Mapping[str, Sequence[str]] = {},
) -> list[int]:
    """How many of a segment's scores with sample times in ``[start, end)`` fall in each
    tenth of 0..1 (``rollup.HISTOGRAM_BINS``; below 0 in the first, 1 and above in the
    last; null scores in none): the alert page's histograms.

    The whole minutes are counted from the minute rollups; the partial minutes at the
    ends, and the minutes the rollups do not bin (``segment_minutes.unbinned``), from
    the score rows. The arguments are :func:`segment_scores`'.
    """
    whole, ranges = whole_minutes(start, end)
    rows = [] if whole is None else minute_levels(
        conn, metric=metric, score=score, minutes=whole, labels=labels, filters=filters)
    unknown = unbinned(rows)
    counts = histogram(rows, skip=unknown)
    for value, _ in segment_scores(conn, metric=metric, score=score, start=start, end=end,
                                   labels=labels, filters=filters,
                                   ranges=ranges + minute_ranges(unknown)):
        counts[value_bin(value)] += 1
    return counts


def segment_scores(
    conn: Connection, *, metric: str, score: str, start: datetime, end: datetime,
    labels: Mapping[str, str], filters: Mapping[str, Sequence[str]] = {},
    ranges: Sequence[Range] | None = None,
) -> list[tuple[float, datetime]]:
    """The ``(value, sample time)`` of a segment's scores with sample times in
    ``[start, end)`` (only those in ``ranges`` within it, when given), null scores left out.

    The segment's attribute sets of the range come from the rollups, and on Postgres
    each one's rows of the range are read on ``ix_verdicts_metric_segment_sample_ts``
    (:func:`segment_condition`); the range is given on both tables' sample time and
    partition key, so it reads only the range's partitions (:func:`_in_window`). The
    arguments are :func:`lowest_scoring`'s, without its ``limit`` and ``highest``.
    """
    ranges = [(start, end)] if ranges is None else ranges
    if not ranges:
        return []
    vs, v = verdict_scores.c, verdicts.c
    segment = segment_condition(conn, metric=metric, score=score, start=start, end=end,
                                labels=labels, filters=filters)
    if segment is None:
        return []
    reads: list[Select[Any]] = [
        select(vs.value, vs.sample_ts)
        .select_from(verdict_scores.join(verdicts, v.id == vs.verdict_id))
        .where(*_in_window(metric=metric, score=score, start=low, end=high), *segment,
               vs.value.is_not(None))
        for low, high in ranges]
    rows = conn.execute(reads[0] if len(reads) == 1 else union_all(*reads))
    return [(float(value), to_utc(ts)) for value, ts in rows]


def _in_window(*, metric: str, score: str, start: datetime,
               end: datetime) -> list[ColumnElement[bool]]:
    """Conditions on a join of ``verdict_scores`` and ``verdicts`` that keep one score's
    rows with sample times in ``[start, end)``.

    The time range is on both tables (the same sample time): the segment's index range
    on verdicts, then each score by its key; and on both tables' partition key
    (``created_at``, bounded by :func:`created_since`), so only the range's partitions
    are read.
    """
    vs, v = verdict_scores.c, verdicts.c
    since = created_since(to_utc(start))
    return [v.metric == metric, v.sample_ts >= to_utc(start), v.sample_ts < to_utc(end),
            vs.metric == metric, vs.name == score, vs.sample_ts >= to_utc(start),
            vs.sample_ts < to_utc(end), vs.created_at >= since, v.created_at >= since]


def purge_samples(engine: Engine, *, before: datetime, batch_rows: int = PURGE_BATCH_ROWS,
                  dry_run: bool = False) -> tuple[int, int]:
    """Delete the kept samples of verdicts created before ``before``, in small transactions.

    On a partitioned store the days of samples wholly before ``before`` are dropped
    first, a partition each (the verdicts stay); the rest is deleted row by row.

    Args:
        engine: The store's engine.
        before: The cut-off on the verdict's creation time.
        batch_rows: Rows per transaction.
        dry_run: Only count.

    Returns:
        ``(rows deleted or to delete, transactions)``.
    """
    old = verdict_samples.c.created_at < to_utc(before)
    if dry_run:
        with engine.connect() as conn:
            return int(conn.execute(select(func.count()).where(old)).scalar_one()), 0
    total = transactions = 0
    with engine.connect() as conn:
        days = (expired(list_partitions(conn, verdict_samples.name), before=to_utc(before))
                if is_partitioned(conn) else [])
    for day in days:
        with engine.begin() as conn:
            total += conn.execute(text(f"SELECT count(*) FROM {day.name}")).scalar_one()
            drop_partition(conn, day.suffix, tables=[verdict_samples.name])
        transactions += 1
    while True:
        # Oldest first along the created_at index: LIMIT stops the scan early.
        batch = (select(verdict_samples.c.verdict_id).where(old)
                 .order_by(verdict_samples.c.created_at).limit(batch_rows).scalar_subquery())
        with engine.begin() as conn:
            deleted = conn.execute(delete(verdict_samples).where(
                and_(verdict_samples.c.verdict_id.in_(batch)))).rowcount
        transactions += 1
        total += deleted
        if deleted < batch_rows:
            return total, transactions
