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
rows for the whole window, so its Mann-Whitney test stays exact. The SQL is the
store's (``evalfleet.store.queries.alert_windows``): this module asks it for sums per
group, or on SQLite for rows, and makes segments and summaries of them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from evalfleet.alerts.cover import Cover, Range, cover
from evalfleet.alerts.rule import VERDICT_EXPLAINERS, Rule, TrailingBaseline
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.statistic import Summary
from evalfleet.store.queries import alert_windows
from evalfleet.store.queries.alert_windows import StoreConnection

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
        filters = tuple(sorted(spec.filter_values.items()))
        baseline = spec.baseline
        cap = baseline.exclude_firing_max if isinstance(baseline, TrailingBaseline) else None
        return cls(metric=spec.metric, score=spec.series, keys=spec.segment_keys,
                   filters=filters, with_levels=rule.score_kind == "ordinal",
                   exclude_rule=spec.name if exclude_firing else None,
                   exclusion_cap=cap if exclude_firing else None)


def fetch_summaries(
    conn: StoreConnection, query: WindowQuery, *, start: datetime, end: datetime,
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
    periods = _exclusion_periods(conn, query) if query.exclude_rule is not None else []
    plan = cover(start, end, cuts=[moment for _, started, ended in periods
                                   for moment in (started, ended) if moment is not None])
    parts = [_rolled(conn, query, plan, periods), _raw(conn, query, plan.raw, periods)]
    summaries = _merged(parts)
    if query.with_levels and any(_off_grid(summary) for summary in summaries.values()):
        # An ordinal score off the level grid: its levels only the score rows hold.
        return _raw(conn, query, ((start, end),), periods)
    return summaries


def _raw(conn: StoreConnection, query: WindowQuery, ranges: tuple[Range, ...],
         periods: list[Period]) -> dict[Segment, Summary]:
    """Summaries of the score rows in ``ranges``."""
    if not ranges:
        return {}
    if alert_windows.embedded(conn):
        rows = alert_windows.score_rows(conn, query, ranges=ranges)
        return _summarise_rows(query, [row for row in rows if not any(
            _excluded(row.ts, row.attributes, period) for period in periods)])
    return _grouped(query, alert_windows.grouped_score_sums(conn, query, ranges=ranges))


def _rolled(conn: StoreConnection, query: WindowQuery, plan: Cover,
            periods: list[Period]) -> dict[Segment, Summary]:
    """Summaries of the whole buckets of ``plan`` from ``score_rollups``."""
    if not plan.buckets:
        return {}
    if alert_windows.embedded(conn):
        return _summarise_rollups(query, alert_windows.rollup_rows(
            conn, query, buckets=plan.buckets), periods)
    return _grouped(query, alert_windows.grouped_rollup_sums(conn, query,
                                                             buckets=plan.buckets))


def _grouped(query: WindowQuery,
             groups: Iterable[alert_windows.GroupSums]) -> dict[Segment, Summary]:
    summaries: dict[Segment, Summary] = {}
    for group in groups:
        segment = Segment(tuple(zip(query.keys, group.values, strict=False)))
        part = _part(group.sums, group.level)
        known = summaries.get(segment)
        summaries[segment] = known.merge(part) if known else part
    return summaries


def _part(sums: alert_windows.Sums, level: float | None) -> Summary:
    return Summary(n=sums.n, total=sums.total, total_sq=sums.total_sq,
                   levels=((level, sums.n),) if level is not None else (),
                   first_seen_ts=sums.first_ts.timestamp() if sums.first_ts else None)


def _off_grid(summary: Summary) -> bool:
    return sum(count for _, count in summary.levels) != summary.n


def _merged(parts: Iterable[dict[Segment, Summary]]) -> dict[Segment, Summary]:
    merged: dict[Segment, Summary] = {}
    for part in parts:
        for segment, summary in part.items():
            known = merged.get(segment)
            merged[segment] = known.merge(summary) if known else summary
    return merged


def _summarise_rollups(query: WindowQuery, rows: list[alert_windows.RollupRow],
                       periods: list[Period]) -> dict[Segment, Summary]:
    """Rollup rows summed at every level of the query's keys (SQLite). A bucket is
    wholly inside or outside each exclusion (``cover``): its start decides."""
    filters = dict(query.filters)
    parts = []
    for row in rows:
        attributes = row.attributes
        if not all(_text(attributes.get(key)) in values for key, values in filters.items()):
            continue
        if any(_excluded(row.bucket, attributes, period) for period in periods):
            continue
        parts.append((attributes, _part(row.sums, row.level if query.with_levels else None)))
    return _summarise_parts(query, parts)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _exclusion_periods(conn: StoreConnection, query: WindowQuery) -> list[Period]:
    periods = []
    for segment, started, ended in alert_windows.exclusions(conn, rule=str(query.exclude_rule)):
        ends = [ended] if ended is not None else []
        if query.exclusion_cap is not None:
            ends.append(started + query.exclusion_cap)
        periods.append((segment, started, min(ends) if ends else None))
    return periods


def _excluded(ts: datetime, attributes: dict[str, Any], period: Period) -> bool:
    labels, started, ended = period
    return (started <= ts and (ended is None or ts < ended)
            and all(attributes.get(key) == value for key, value in labels.items()))


def _summarise_rows(query: WindowQuery,
                    rows: list[alert_windows.ScoredRow]) -> dict[Segment, Summary]:
    """Summaries at every level of the query's keys, as the Postgres query makes them."""
    return _summarise_parts(query, [
        (row.attributes, Summary(n=1, total=row.value, total_sq=row.value * row.value,
                                 levels=((row.value, 1),) if query.with_levels else (),
                                 first_seen_ts=row.ts.timestamp()))
        for row in rows])


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


def fetch_explained(
    conn: StoreConnection, query: WindowQuery, *, explain: tuple[str, ...],
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
        part = _part(row.sums, None)
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
