"""Summaries of a score per segment over a time window, read from the verdict store.

One query per window: ``verdict_scores`` is range-scanned on its (metric, name,
sample_ts) index, joined to ``verdicts`` for the segment attributes (both bounded on
their partition key, ``created_at``, by the window's start), and
aggregated at every level of the rule's segments at once (``GROUPING SETS``).
Windows are on ``sample_ts``, the time of the sample itself, so verdicts
that arrive late (backfills, a queue that was behind) land in the window they
belong to. Only sums are read: count, sum and sum of squares per segment, and
for ordinal scores the count per level, so the cost does not grow with the
number of samples in Python. On the embedded SQLite store (no ``GROUPING SETS``, no
JSON containment) the window's values are read and summarised in Python instead:
the same summaries, at a cost that grows with the window's samples.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.engine import Connection

from evalfleet.alerts.rule import Rule, TrailingBaseline
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.statistic import Summary
from evalfleet.store.dialect import is_sqlite
from evalfleet.store.evidence import attributes_match
from evalfleet.store.partitions import created_since
from evalfleet.store.schema import alert_exclusions, verdict_scores, verdicts
from evalfleet.store.sql import to_utc


@dataclass(frozen=True)
class WindowQuery:
    """What to summarise: one score of one metric, split by some attributes."""

    metric: str
    """The metric."""
    score: str
    """The stored score."""
    keys: tuple[str, ...]
    """Attributes to split by; each prefix is one level."""
    filters: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Only samples whose attribute is one of the values."""
    with_levels: bool = False
    """Count each distinct value too (ordinal scores)."""
    exclude_rule: str | None = None
    """Leave out samples from the periods this rule fired for a segment they belong to."""
    exclusion_cap: timedelta | None = None
    """Leave them out for at most this long from each period's start (None: no cap)."""

    @classmethod
    def for_rule(cls, rule: Rule, *, exclude_firing: bool = False) -> WindowQuery:
        """The query of ``rule``'s windows."""
        spec = rule.spec
        filters = tuple(
            (key, (value,) if isinstance(value, str) else tuple(value))
            for key, value in sorted(spec.filters.items())
        )
        baseline = spec.baseline
        cap = baseline.exclude_firing_max if isinstance(baseline, TrailingBaseline) else None
        return cls(metric=spec.metric, score=spec.series, keys=spec.segment_keys,
                   filters=filters, with_levels=rule.kind == "ordinal",
                   exclude_rule=spec.name if exclude_firing else None,
                   exclusion_cap=cap if exclude_firing else None)


def fetch_summaries(
    conn: Connection, query: WindowQuery, *, start: datetime, end: datetime,
) -> dict[Segment, Summary]:
    """Summaries of every segment with samples in ``[start, end)``.

    Args:
        conn: A Postgres connection.
        query: What to summarise.
        start: Window start (inclusive), on sample time.
        end: Window end (exclusive).

    Returns:
        Summaries by segment, the whole (no labels) included when it has samples.
        Samples without a segment's attribute count only at the levels above it.
    """
    if is_sqlite(conn):
        return _summarise_rows(query, _scored_rows(conn, query, start=start, end=end))
    sql, params = _build(query)
    params.update(start=start, end=end, created_since=created_since(start))
    summaries: dict[Segment, Summary] = {}
    for row in conn.execute(text(sql), params).mappings():
        depth = len(query.keys) - bin(row["grouping_mask"]).count("1")
        values = [row[f"s{i}"] for i in range(depth)]
        # The empty grouping set yields a row even without samples; missing attributes
        # group as NULL and belong only to the levels above.
        if row["n"] == 0 or any(value is None for value in values):
            continue
        segment = Segment(tuple(zip(query.keys, values, strict=False)))
        first_ts = row["first_ts"].timestamp() if row["first_ts"] is not None else None
        part = Summary(
            n=row["n"], total=float(row["total"]), total_sq=float(row["total_sq"]),
            levels=((float(row["value"]), row["n"]),) if query.with_levels else (),
            first_seen_ts=first_ts,
        )
        known = summaries.get(segment)
        summaries[segment] = known.merge(part) if known else part
    return summaries


def _scored_rows(conn: Connection, query: WindowQuery, *, start: datetime,
                 end: datetime) -> list[tuple[float, datetime, dict[str, Any]]]:
    """The window's values with their times and attributes (SQLite: no GROUPING SETS,
    no JSON containment; an embedded store holds one machine's traffic)."""
    vs = verdict_scores.c
    rows = conn.execute(
        select(vs.value, vs.sample_ts, verdicts.c.attributes)
        .select_from(verdict_scores.join(verdicts, verdicts.c.id == vs.verdict_id))
        .where(vs.metric == query.metric, vs.name == query.score,
               vs.sample_ts >= to_utc(start), vs.sample_ts < to_utc(end),
               *attributes_match({}, dict(query.filters))),
    ).all()
    scored = [(float(value), to_utc(ts), attributes or {}) for value, ts, attributes in rows]
    if query.exclude_rule is None:
        return scored
    periods = _exclusion_periods(conn, query)
    return [row for row in scored
            if not any(_excluded(row[1], row[2], period) for period in periods)]


def _exclusion_periods(conn: Connection, query: WindowQuery) -> list[tuple[
        dict[str, str], datetime, datetime | None]]:
    x = alert_exclusions.c
    periods = []
    for segment, started, ended in conn.execute(
            select(x.segment, x.started_at, x.ended_at).where(x.rule == query.exclude_rule)):
        started = to_utc(started)
        ends = [to_utc(ended)] if ended is not None else []
        if query.exclusion_cap is not None:
            ends.append(started + query.exclusion_cap)
        periods.append((dict(segment), started, min(ends) if ends else None))
    return periods


def _excluded(ts: datetime, attributes: dict[str, Any],
              period: tuple[dict[str, str], datetime, datetime | None]) -> bool:
    labels, started, ended = period
    return (started <= ts and (ended is None or ts < ended)
            and all(attributes.get(key) == value for key, value in labels.items()))


def _summarise_rows(query: WindowQuery,
                    rows: list[tuple[float, datetime, dict[str, Any]]]) -> dict[Segment, Summary]:
    """Summaries at every level of the query's keys, as the Postgres query makes them."""
    groups: dict[Segment, list[tuple[float, datetime]]] = {}
    for value, ts, attributes in rows:
        labels: list[tuple[str, str]] = []
        for depth in range(len(query.keys) + 1):
            groups.setdefault(Segment(tuple(labels)), []).append((value, ts))
            if depth == len(query.keys) or attributes.get(query.keys[depth]) is None:
                break
            labels.append((query.keys[depth], str(attributes[query.keys[depth]])))
    summaries = {}
    for segment, points in groups.items():
        values = [value for value, _ in points]
        summary = Summary.of_values(values, with_levels=query.with_levels)
        summaries[segment] = replace(
            summary, first_seen_ts=min(ts for _, ts in points).timestamp())
    return summaries


def _build(query: WindowQuery) -> tuple[str, dict[str, Any]]:
    params: dict[str, Any] = {"metric": query.metric, "score": query.score}
    columns = []
    for i, key in enumerate(query.keys):
        params[f"k{i}"] = key
        columns.append(f"v.attributes ->> :k{i} AS s{i}")
    conditions = [
        "vs.metric = :metric", "vs.name = :score",
        "vs.sample_ts >= :start", "vs.sample_ts < :end",
        # The partition key, so only the window's partitions are read.
        "vs.created_at >= :created_since", "v.created_at >= :created_since",
    ]
    for i, (key, values) in enumerate(query.filters):
        params[f"f{i}"], params[f"fv{i}"] = key, list(values)
        conditions.append(f"(v.attributes ->> :f{i}) = ANY(:fv{i})")
    if query.exclude_rule is not None:
        params["rule"] = query.exclude_rule
        capped = ""
        if query.exclusion_cap is not None:
            params["cap"] = query.exclusion_cap
            capped = " AND vs.sample_ts < x.started_at + :cap"
        conditions.append(
            "NOT EXISTS (SELECT 1 FROM alert_exclusions x WHERE x.rule = :rule"
            " AND v.attributes @> x.segment AND vs.sample_ts >= x.started_at"
            f" AND (x.ended_at IS NULL OR vs.sample_ts < x.ended_at){capped})",
        )
    names = [f"s{i}" for i in range(len(query.keys))]
    level = ["value"] if query.with_levels else []
    sets = ", ".join(
        "(" + ", ".join(level + names[:depth]) + ")" for depth in range(len(names) + 1)
    )
    mask = f"GROUPING({', '.join(names)})" if names else "0"
    inner_columns = ", ".join(["vs.value AS value", "vs.sample_ts AS sample_ts", *columns])
    outer_columns = ", ".join([f"{mask} AS grouping_mask", *names, *level])
    sql = (
        f"SELECT {outer_columns}, count(*) AS n, sum(value) AS total,"
        " sum(value * value) AS total_sq, min(sample_ts) AS first_ts"
        f" FROM (SELECT {inner_columns}"
        " FROM verdict_scores vs JOIN verdicts v ON v.id = vs.verdict_id"
        f" WHERE {' AND '.join(conditions)}) AS scored"
        f" GROUP BY GROUPING SETS ({sets})"
    )
    return sql, params
