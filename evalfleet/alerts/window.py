"""Summaries of a score per segment over a time window, read from the rollups.

A window on sample time (so verdicts that arrive late, backfills, a queue that was
behind, land in the window they belong to) is split by ``cover``: its whole hours and
minutes are summed from ``score_rollups`` (``evalfleet.store.rollup``), its partial
minutes at either end from the score rows, so a cycle costs the segments and buckets
it reads, not the traffic or the history. Only sums are read: count, sum and sum of
squares per segment, and for ordinal scores the count per level, all of which add up
across buckets: the summaries equal those of the score rows (counts and levels
exactly, sums to floating-point rounding).

On Postgres each part is one query aggregated at every level of the rule's segments
at once (``GROUPING SETS``); the score rows are range-scanned on their (metric, name,
sample_ts) index and joined to ``verdicts`` for the segment attributes, both bounded on
their partition key. On the embedded SQLite store (no ``GROUPING SETS``, no JSON
containment) the rows are read and summed in Python. An ordinal score with values off
the rollups' level grid (not on a scale of up to eleven points) is read from the score
rows for the whole window, so its Mann-Whitney test stays exact.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, or_, select, text
from sqlalchemy.engine import Connection, RowMapping

from evalfleet.alerts.cover import Cover, Range, cover
from evalfleet.alerts.rule import VERDICT_EXPLAINERS, Rule, TrailingBaseline
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.statistic import Summary
from evalfleet.store.dialect import is_sqlite
from evalfleet.store.evidence import attributes_match
from evalfleet.store.partitions import created_since
from evalfleet.store.queries import alert_windows
from evalfleet.store.rollup import LEVEL_GRID, OFF_GRID
from evalfleet.store.schema import alert_exclusions, score_rollups, verdict_scores, verdicts
from evalfleet.store.sql import to_utc

#: A baseline exclusion: the segment's labels, its start, its end (None: still open).
Period = tuple[dict[str, str], datetime, datetime | None]


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
                   filters=filters, with_levels=rule.score_kind == "ordinal",
                   exclude_rule=spec.name if exclude_firing else None,
                   exclusion_cap=cap if exclude_firing else None)


def fetch_summaries(
    conn: Connection, query: WindowQuery, *, start: datetime, end: datetime,
) -> dict[Segment, Summary]:
    """Summaries of every segment with samples in ``[start, end)``, from the rollups and
    the partial minutes' score rows (the sequential detector's increments come from here).

    Args:
        conn: A connection to the store's database.
        query: What to summarise.
        start: Window start (inclusive), on sample time.
        end: Window end (exclusive).

    Returns:
        Summaries by segment, the whole (no labels) included when it has samples.
        Samples without a segment's attribute count only at the levels above it.
    """
    if not is_sqlite(conn):
        # These statements run in milliseconds; a long range's row estimate still passes
        # jit_above_cost, and compiling then costs seconds (docs/operating.md).
        conn.exec_driver_sql("SET LOCAL jit = off")
    periods = _exclusion_periods(conn, query) if query.exclude_rule is not None else []
    plan = cover(start, end, cuts=[moment for _, started, ended in periods
                                   for moment in (started, ended) if moment is not None])
    parts = [_rolled(conn, query, plan, periods), _raw(conn, query, plan.raw, periods)]
    summaries = _merged(parts)
    if query.with_levels and any(_off_grid(summary) for summary in summaries.values()):
        # An ordinal score off the level grid: its levels only the score rows hold.
        return _raw(conn, query, ((start, end),), periods)
    return summaries


def _raw(conn: Connection, query: WindowQuery, ranges: tuple[Range, ...],
         periods: list[Period]) -> dict[Segment, Summary]:
    """Summaries of the score rows in ``ranges``."""
    if not ranges:
        return {}
    if is_sqlite(conn):
        return _summarise_rows(query, _scored_rows(conn, query, ranges, periods))
    sql, params = _build(query, ranges)
    return _grouped(query, conn.execute(text(sql), params).mappings(),
                    level_of=lambda row: float(row["level_key"]))


def _rolled(conn: Connection, query: WindowQuery, plan: Cover,
            periods: list[Period]) -> dict[Segment, Summary]:
    """Summaries of the whole buckets of ``plan`` from ``score_rollups``."""
    if not plan.buckets:
        return {}
    if is_sqlite(conn):
        return _summarise_rollups(query, plan, periods, conn)
    sql, params = _build_rolled(query, plan)
    return _grouped(query, conn.execute(text(sql), params).mappings(), level_of=_level_value)


def _grouped(query: WindowQuery, rows: Iterable[RowMapping],
             level_of: Callable[[RowMapping], float | None]) -> dict[Segment, Summary]:
    summaries: dict[Segment, Summary] = {}
    for row in rows:
        depth = len(query.keys) - bin(row["grouping_mask"]).count("1")
        values = [row[f"s{i}"] for i in range(depth)]
        # The empty grouping set yields a row even without samples; missing attributes
        # group as NULL and belong only to the levels above.
        if not row["n"] or any(value is None for value in values):
            continue
        segment = Segment(tuple(zip(query.keys, values, strict=False)))
        level = level_of(row) if query.with_levels else None
        part = _part(row["n"], row["total"], row["total_sq"], row["first_ts"], level)
        known = summaries.get(segment)
        summaries[segment] = known.merge(part) if known else part
    return summaries


def _part(n: int, total: float, total_sq: float, first: Any, level: float | None) -> Summary:
    return Summary(n=int(n), total=float(total), total_sq=float(total_sq),
                   levels=((level, int(n)),) if level is not None else (),
                   first_seen_ts=to_utc(first).timestamp() if first is not None else None)


def _level_value(row: RowMapping) -> float | None:
    level = row["level_key"]
    return None if level == OFF_GRID else level / LEVEL_GRID


def _off_grid(summary: Summary) -> bool:
    return sum(count for _, count in summary.levels) != summary.n


def _merged(parts: Iterable[dict[Segment, Summary]]) -> dict[Segment, Summary]:
    merged: dict[Segment, Summary] = {}
    for part in parts:
        for segment, summary in part.items():
            known = merged.get(segment)
            merged[segment] = known.merge(summary) if known else summary
    return merged


def _scored_rows(conn: Connection, query: WindowQuery, ranges: tuple[Range, ...],
                 periods: list[Period]) -> list[tuple[float, datetime, dict[str, Any]]]:
    """The values in ``ranges`` with their times and attributes (SQLite: no GROUPING
    SETS, no JSON containment; an embedded store holds one machine's traffic)."""
    vs = verdict_scores.c
    rows = conn.execute(
        select(vs.value, vs.sample_ts, verdicts.c.attributes)
        .select_from(verdict_scores.join(verdicts, verdicts.c.id == vs.verdict_id))
        .where(vs.metric == query.metric, vs.name == query.score,
               or_(*(and_(vs.sample_ts >= to_utc(low), vs.sample_ts < to_utc(high))
                     for low, high in ranges)),
               *attributes_match({}, dict(query.filters))),
    ).all()
    scored = [(float(value), to_utc(ts), attributes or {}) for value, ts, attributes in rows]
    return [row for row in scored
            if not any(_excluded(row[1], row[2], period) for period in periods)]


def _summarise_rollups(query: WindowQuery, plan: Cover, periods: list[Period],
                       conn: Connection) -> dict[Segment, Summary]:
    """The rollup rows of ``plan`` summed at every level of the query's keys (SQLite).
    A bucket is wholly inside or outside each exclusion (``cover``): its start decides."""
    r = score_rollups.c
    rows = conn.execute(
        select(r.bucket, r.attributes, r.level, r.n, r.total, r.total_sq, r.first_ts)
        .where(r.metric == query.metric, r.name == query.score, or_(*(
            and_(r.span_s == span, r.bucket >= to_utc(low), r.bucket < to_utc(high))
            for span, ranges in plan.buckets.items() for low, high in ranges))),
    ).all()
    filters = dict(query.filters)
    parts = []
    for bucket, attributes, level, n, total, total_sq, first in rows:
        attributes = attributes or {}
        if not all(_text(attributes.get(key)) in values for key, values in filters.items()):
            continue
        if any(_excluded(to_utc(bucket), attributes, period) for period in periods):
            continue
        value = None if level == OFF_GRID else level / LEVEL_GRID
        parts.append((attributes, _part(n, total, total_sq, first,
                                        value if query.with_levels else None)))
    return _summarise_parts(query, parts)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _exclusion_periods(conn: Connection, query: WindowQuery) -> list[Period]:
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


def _excluded(ts: datetime, attributes: dict[str, Any], period: Period) -> bool:
    labels, started, ended = period
    return (started <= ts and (ended is None or ts < ended)
            and all(attributes.get(key) == value for key, value in labels.items()))


def _summarise_rows(query: WindowQuery,
                    rows: list[tuple[float, datetime, dict[str, Any]]]) -> dict[Segment, Summary]:
    """Summaries at every level of the query's keys, as the Postgres query makes them."""
    return _summarise_parts(query, [
        (attributes, Summary(n=1, total=value, total_sq=value * value,
                             levels=((value, 1),) if query.with_levels else (),
                             first_seen_ts=ts.timestamp()))
        for value, ts, attributes in rows])


def _summarise_parts(query: WindowQuery,
                     parts: list[tuple[dict[str, Any], Summary]]) -> dict[Segment, Summary]:
    """Partial summaries with their attributes, added up at every level of the keys."""
    groups: dict[Segment, list[Summary]] = {}
    for attributes, part in parts:
        labels: list[tuple[str, str]] = []
        for depth in range(len(query.keys) + 1):
            groups.setdefault(Segment(tuple(labels)), []).append(part)
            if depth == len(query.keys) or attributes.get(query.keys[depth]) is None:
                break
            labels.append((query.keys[depth], str(attributes[query.keys[depth]])))
    return {segment: _sum(summaries) for segment, summaries in groups.items()}


def _sum(summaries: list[Summary]) -> Summary:
    """One summary of many parts; levels counted once at the end (merging two at a time
    would sort the levels again for every part)."""
    levels: dict[float, int] = {}
    for part in summaries:
        for value, count in part.levels:
            levels[value] = levels.get(value, 0) + count
    firsts = [part.first_seen_ts for part in summaries if part.first_seen_ts is not None]
    return Summary(n=sum(part.n for part in summaries),
                   total=math.fsum(part.total for part in summaries),
                   total_sq=math.fsum(part.total_sq for part in summaries),
                   levels=tuple(sorted(levels.items())),
                   first_seen_ts=min(firsts) if firsts else None)


def _conditions(query: WindowQuery, params: dict[str, Any], *, alias: str,
                moment: str) -> list[str]:
    """The filters and the exclusion test on ``{alias}.attributes`` at time ``moment``."""
    conditions = []
    for i, (key, values) in enumerate(query.filters):
        params[f"f{i}"], params[f"fv{i}"] = key, list(values)
        conditions.append(f"({alias}.attributes ->> :f{i}) = ANY(:fv{i})")
    if query.exclude_rule is not None:
        params["rule"] = query.exclude_rule
        capped = ""
        if query.exclusion_cap is not None:
            params["cap"] = query.exclusion_cap
            capped = f" AND {moment} < x.started_at + :cap"
        conditions.append(
            "NOT EXISTS (SELECT 1 FROM alert_exclusions x WHERE x.rule = :rule"
            f" AND {alias}.attributes @> x.segment AND {moment} >= x.started_at"
            f" AND (x.ended_at IS NULL OR {moment} < x.ended_at){capped})",
        )
    return conditions


def _grouping(query: WindowQuery, inner: str) -> str:
    """The outer aggregation of ``inner`` at every level of the keys (``GROUPING SETS``)."""
    names = [f"s{i}" for i in range(len(query.keys))]
    level = ["level_key"] if query.with_levels else []
    sets = ", ".join(
        "(" + ", ".join(level + names[:depth]) + ")" for depth in range(len(names) + 1)
    )
    mask = f"GROUPING({', '.join(names)})" if names else "0"
    outer_columns = ", ".join([f"{mask} AS grouping_mask", *names, *level])
    return (f"SELECT {outer_columns}, sum(n) AS n, sum(total) AS total,"
            f" sum(total_sq) AS total_sq, min(first_ts) AS first_ts FROM ({inner}) AS scored"
            f" GROUP BY GROUPING SETS ({sets})")


def _key_columns(query: WindowQuery, params: dict[str, Any], *, alias: str) -> list[str]:
    columns = []
    for i, key in enumerate(query.keys):
        params[f"k{i}"] = key
        columns.append(f"{alias}.attributes ->> :k{i} AS s{i}")
    return columns


def _build(query: WindowQuery, ranges: tuple[Range, ...]) -> tuple[str, dict[str, Any]]:
    """The score rows' query (Postgres) over ``ranges`` of sample time."""
    params: dict[str, Any] = {"metric": query.metric, "score": query.score,
                              "created_since": created_since(min(low for low, _ in ranges))}
    conditions = [
        "vs.metric = :metric", "vs.name = :score",
        alert_windows.ranges_sql("vs.sample_ts", ranges, params, prefix="t"),
        # The partition key, so only the window's partitions are read.
        "vs.created_at >= :created_since", "v.created_at >= :created_since",
        *_conditions(query, params, alias="v", moment="vs.sample_ts"),
    ]
    columns = ["1 AS n", "vs.value AS total", "vs.value * vs.value AS total_sq",
               "vs.sample_ts AS first_ts", "vs.value AS level_key",
               *_key_columns(query, params, alias="v")]
    inner = (f"SELECT {', '.join(columns)}"
             " FROM verdict_scores vs JOIN verdicts v ON v.id = vs.verdict_id"
             f" WHERE {' AND '.join(conditions)}")
    return _grouping(query, inner), params


def _build_rolled(query: WindowQuery, plan: Cover) -> tuple[str, dict[str, Any]]:
    """The rollups' query (Postgres) over the whole buckets of ``plan``."""
    params: dict[str, Any] = {"metric": query.metric, "score": query.score}
    spans = []
    for span, ranges in plan.buckets.items():
        params[f"span{span}"] = span
        spans.append(alert_windows.ranges_sql("r.bucket", ranges, params, prefix=f"b{span}_",
                             extra=f"r.span_s = :span{span} AND "))
    conditions = ["r.metric = :metric", "r.name = :score", "(" + " OR ".join(spans) + ")",
                  *_conditions(query, params, alias="r", moment="r.bucket")]
    columns = ["r.n AS n", "r.total AS total", "r.total_sq AS total_sq",
               "r.first_ts AS first_ts", "r.level AS level_key",
               *_key_columns(query, params, alias="r")]
    inner = (f"SELECT {', '.join(columns)} FROM score_rollups r"
             f" WHERE {' AND '.join(conditions)}")
    return _grouping(query, inner), params


def fetch_explained(
    conn: Connection, query: WindowQuery, *, explain: tuple[str, ...],
    heads: Iterable[Segment], start: datetime, end: datetime,
) -> dict[Segment, Summary]:
    """The window's summaries under ``heads``, split by the segment keys and by each
    ``explain`` attribute in turn (an incident's causes outside the segment tree).

    Read as a window is: its whole minutes and hours from the rollups, which keep the
    verdict's attributes and its own fields (:data:`VERDICT_EXPLAINERS`, the judge model
    and prompt version, ``evalfleet.store.rollup.VERDICT_COLUMNS``), its partial minutes
    from the score rows; so it costs the window's buckets and segments, not its samples,
    even when a head is the whole traffic. Run only in cycles with an incident; it reads
    neither the baseline nor any history. A verdict field the rollups do not key on
    cannot be named: the rule refuses names outside :data:`VERDICT_EXPLAINERS` and the
    sample attributes, and the store raises ``NotInRollups`` for such a column.

    Args:
        conn: A connection to the store's database.
        query: The rule's window query (its keys, filters; exclusions are not applied).
        explain: Attribute names.
        heads: The incidents' highest segments; samples under none of them are left out.
        start: Window start (inclusive), on sample time.
        end: Window end (exclusive).

    Returns:
        By *unit*: a segment at the depth of every key with one ``(attribute, value)``
        label appended (the verdict's own fields: the deepest segment a sample has values
        for); samples without the attribute are in no unit of it.
    """
    heads = sorted(set(heads))
    if not explain or not heads:
        return {}
    plan = cover(start, end)
    found = alert_windows.explained_sums(
        conn, metric=query.metric, score=query.score, keys=query.keys,
        filters=dict(query.filters), heads=[head.as_dict() for head in heads],
        explain=[(name, VERDICT_EXPLAINERS.get(name)) for name in explain],
        buckets=plan.buckets, ranges=plan.raw)
    units: dict[Segment, Summary] = {}
    for row in found:
        name = explain[row.explainer]
        if name in VERDICT_EXPLAINERS:
            labels = _prefix(query.keys, list(row.keys))
        elif any(value is None for value in row.keys):
            continue
        else:
            labels = tuple(zip(query.keys, (str(value) for value in row.keys), strict=True))
        unit = Segment((*labels, (name, row.value)))
        if not row.sums.n or not _under(unit, heads):
            continue
        sums = row.sums
        part = _part(sums.n, sums.total, sums.total_sq, sums.first_ts, None)
        known = units.get(unit)
        units[unit] = known.merge(part) if known else part
    return units


def _under(unit: Segment, heads: list[Segment]) -> bool:
    return any(unit.labels[:head.depth] == head.labels for head in heads)


def _prefix(keys: tuple[str, ...], values: list[Any]) -> tuple[tuple[str, str], ...]:
    """The labels of the deepest segment a sample has values for."""
    labels = []
    for key, value in zip(keys, values, strict=True):
        if value is None:
            break
        labels.append((key, str(value)))
    return tuple(labels)
