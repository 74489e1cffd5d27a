"""Everything shown about one alert: state, history, window against baseline, trend, evidence.

Read by ``evalfleet alerts show``, the demo and the web page, on Postgres and SQLite.
The numbers are the engine's own from the segment's last evaluation (stored with its
state). The trend is summed from the rollups (``evalfleet.store.rollup``): its points
are whole minutes or whole hours, so a week's trend is a few hundred rollup rows
whatever the traffic. So are the histograms of the window and of the same length of
time at the baseline's end (the minute rollups count a score per level and, off the
level grid, per tenth of 0..1). The samples themselves are read only where a person
looks at them: the window's worst samples, from the minutes the rollups say can hold
them (each of the segment's attribute sets read as one range of the (metric, attribute
key, sample_ts) index). The statements are the store's
(``evalfleet.store.queries.alert_view``, ``evalfleet.store.queries.evidence``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from evalfleet.alerts.cover import MINUTE_S, floor_time
from evalfleet.alerts.evidence import window_evidence
from evalfleet.alerts.ledger import StoredState, load_state
from evalfleet.alerts.rule import CalibrationBaseline, PinnedBaseline, Rule, TrailingBaseline
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.window import WindowQuery, fetch_summaries
from evalfleet.store import SqlStore, StoreConnection
from evalfleet.store.queries.alert_view import Transition, rollup_sums, state_changes
from evalfleet.store.queries.evidence import Evidence, segment_histogram
from evalfleet.store.sql import to_utc

#: Points of the trend.
TREND_BUCKETS = 24

#: Worst samples shown.
WORST_SAMPLES = 5

#: Windows a threshold-only rule's trend spans.
THRESHOLD_TREND_WINDOWS = 12


@dataclass(frozen=True)
class Bucket:
    """The segment's values in one stretch of time."""

    start: datetime
    """Where the stretch starts (inclusive)."""
    n: int
    """Samples in it."""
    mean: float | None
    """Their mean (None without samples)."""


@dataclass
class AlertView:
    """One rule and segment, as a person looks at it."""

    rule: Rule
    """The rule."""
    segment: Segment
    """The segment."""
    stored: StoredState | None
    """The current state and the numbers of its last evaluation (None: never evaluated)."""
    at: datetime
    """The evaluation time the view is about (the window ends here)."""
    history: list[Transition] = field(default_factory=list)
    """Changes of state, oldest first."""
    trend: list[Bucket] = field(default_factory=list)
    """The segment's mean over time, ending at ``at``."""
    histogram: list[int] = field(default_factory=list)
    """The window's scores per tenth of 0..1 (:func:`load_histogram`)."""
    baseline_histogram: list[int] = field(default_factory=list)
    """A trailing baseline's, over the last window-length of it (empty for other
    baselines)."""
    worst: list[Evidence] = field(default_factory=list)
    """The window's worst-scoring samples, worst first."""

    @property
    def finding(self) -> dict[str, Any]:
        """The numbers of the last evaluation (empty when never evaluated)."""
        return self.stored.finding if self.stored else {}

    @property
    def window_start(self) -> datetime:
        """Where the current window starts."""
        return self.at - self.rule.spec.window


def load_alert_view(
    store: SqlStore, rule: Rule, segment: Segment, *, at: datetime | None = None,
    buckets: int = TREND_BUCKETS, worst: int = WORST_SAMPLES,
) -> AlertView:
    """Read what there is to show about ``rule`` in ``segment``.

    Args:
        store: The verdict store (every read on one of its connections).
        rule: The rule.
        segment: The segment.
        at: The evaluation time to look at; None for the segment's last evaluation
            (or now when it was never evaluated).
        buckets: Points of the trend.
        worst: Worst samples shown.
    """
    with store.connect() as conn:
        stored = load_state(conn, rule.name, segment)
        moment = to_utc(at) if at is not None else (
            stored.evaluated_at if stored else datetime.now(UTC))
        view = AlertView(rule=rule, segment=segment, stored=stored, at=moment)
        view.history = load_history(conn, rule=rule.name, segment=segment)
        view.trend = load_trend(conn, rule, segment, end=moment, span=trend_span(rule),
                                buckets=buckets)
        view.histogram = load_histogram(conn, rule, segment, start=view.window_start,
                                        end=moment)
        view.worst = window_evidence(conn, rule, segment, at=moment, limit=worst)
        baseline = rule.spec.baseline
        if rule.spec.uses_baseline and isinstance(baseline, TrailingBaseline):
            end = view.window_start - baseline.gap
            view.baseline_histogram = load_histogram(
                conn, rule, segment, start=end - min(rule.spec.window, baseline.window), end=end)
    return view


def trend_span(rule: Rule) -> timedelta:
    """How far back a rule's trend reaches: its baseline's look-back and its window."""
    spec = rule.spec
    baseline = spec.baseline
    if not spec.uses_baseline or isinstance(baseline, CalibrationBaseline):
        return spec.window * THRESHOLD_TREND_WINDOWS
    if isinstance(baseline, PinnedBaseline):
        return baseline.window
    return spec.window + baseline.gap + baseline.window


def load_history(conn: StoreConnection, *, rule: str, segment: Segment,
                 limit: int = 200) -> list[Transition]:
    """The segment's latest changes of state, oldest first."""
    return state_changes(conn, rule=rule, segment_key=segment.key, limit=limit)


def load_histogram(conn: StoreConnection, rule: Rule, segment: Segment, *, start: datetime,
                   end: datetime) -> list[int]:
    """The segment's scores with sample times in ``[start, end)`` per tenth of 0..1
    (:func:`evalfleet.store.queries.evidence.segment_histogram`: from the minute rollups)."""
    spec = rule.spec
    return segment_histogram(conn, metric=spec.metric, score=spec.series, start=start,
                             end=end, labels=segment.as_dict(), filters=spec.filter_values)


def load_trend(conn: StoreConnection, rule: Rule, segment: Segment, *, end: datetime,
               span: timedelta, buckets: int) -> list[Bucket]:
    """The segment's mean score over about ``span`` ending at ``end``, summed from the rollups.

    The points are whole rollup buckets, so no sample is read for them: whole hours when
    ``span / buckets`` is an hour or more, else whole minutes, as many as fit in ``span``
    up to the last whole one before ``end`` (about ``buckets`` of them); the stretch from
    there to ``end`` is one more point, read as a window is (``fetch_summaries``).

    Args:
        conn: A connection of the store.
        rule: The rule (metric, score, filters).
        segment: The segment.
        end: Where the trend ends.
        span: How far back it reaches.
        buckets: About how many points.
    """
    end = to_utc(end)
    unit_s = 3600 if span.total_seconds() / buckets >= 3600 else MINUTE_S
    width = timedelta(seconds=unit_s * max(1, round(span.total_seconds() / buckets / unit_s)))
    top = floor_time(end, unit_s)
    count = max(0, int((top - (end - span)) / width))
    first = top - count * width
    query = _segment_query(rule, segment)
    sums = _rolled_series(conn, query, unit_s=unit_s, start=first, end=top, width=width)
    trend = []
    for i in range(count):
        n, total = sums.get(i, (0, 0.0))
        trend.append(Bucket(start=first + i * width, n=n, mean=total / n if n else None))
    if top < end:
        tail = fetch_summaries(conn, query, start=top, end=end).get(Segment())
        trend.append(Bucket(start=top, n=tail.n if tail else 0,
                            mean=tail.mean if tail and tail.n else None))
    return trend


def _segment_query(rule: Rule, segment: Segment) -> WindowQuery:
    """The rule's window query narrowed to one segment, whose summary is the root's."""
    spec = rule.spec
    filters = rule.spec.filter_values
    filters.update({key: (value,) for key, value in segment.labels})
    return WindowQuery(metric=spec.metric, score=spec.series, keys=(),
                       filters=tuple(sorted(filters.items())))


def _rolled_series(conn: StoreConnection, query: WindowQuery, *, unit_s: int,
                   start: datetime, end: datetime,
                   width: timedelta) -> dict[int, tuple[int, float]]:
    """Count and sum of the query's samples in ``[start, end)`` per stretch of ``width``
    (by its index from ``start``), from the rollup rows of ``unit_s`` buckets."""
    if start >= end:
        return {}
    rows = rollup_sums(conn, metric=query.metric, score=query.score, span_s=unit_s,
                       start=start, end=end, filters=dict(query.filters))
    found: dict[int, tuple[int, float]] = {}
    for bucket, n, total in rows:
        index = int((bucket - start) // width)
        known_n, known_total = found.get(index, (0, 0.0))
        found[index] = (known_n + n, known_total + total)
    return found
