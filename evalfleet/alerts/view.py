"""Everything shown about one alert: state, history, window against baseline, trend, evidence.

Read by ``evalfleet alerts show``, the demo and the web page, on Postgres and SQLite.
The numbers are the engine's own from the segment's last evaluation (stored with its
state); the trend and the worst samples are read from the verdicts around it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.engine import Connection

from evalfleet.alerts.evidence import window_evidence
from evalfleet.alerts.ledger import StoredState, load_states
from evalfleet.alerts.rule import CalibrationBaseline, PinnedBaseline, Rule
from evalfleet.alerts.segment import Segment
from evalfleet.store.dialect import is_sqlite
from evalfleet.store.evidence import Evidence, attributes_match
from evalfleet.store.partitions import created_since
from evalfleet.store.schema import alert_transitions, verdict_scores, verdicts
from evalfleet.store.sql import to_utc, unavailable_as_store_error

#: Points of the trend.
TREND_BUCKETS = 24

#: Worst samples shown.
WORST_SAMPLES = 5

#: Windows a threshold-only rule's trend spans.
THRESHOLD_TREND_WINDOWS = 12


@dataclass(frozen=True)
class Transition:
    """One change of state of a rule and segment."""

    at: datetime
    """When."""
    previous: str
    """The state before."""
    state: str
    """The state after."""
    events: tuple[str, ...]
    """What was notified."""
    finding: dict[str, Any]
    """The evaluation's numbers."""


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
    values: list[tuple[float, datetime]] = field(default_factory=list)
    """The segment's values and sample times the trend was drawn from."""
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
    engine: Engine, rule: Rule, segment: Segment, *, at: datetime | None = None,
    buckets: int = TREND_BUCKETS, worst: int = WORST_SAMPLES,
) -> AlertView:
    """Read what there is to show about ``rule`` in ``segment``.

    Args:
        engine: The verdict store's engine.
        rule: The rule.
        segment: The segment.
        at: The evaluation time to look at; None for the segment's last evaluation
            (or now when it was never evaluated).
        buckets: Points of the trend.
        worst: Worst samples shown.
    """
    with unavailable_as_store_error(), engine.connect() as conn:
        stored = next((s for s in load_states(conn, rule.name) if s.segment == segment), None)
        moment = to_utc(at) if at is not None else (
            stored.evaluated_at if stored else datetime.now(UTC))
        view = AlertView(rule=rule, segment=segment, stored=stored, at=moment)
        view.history = load_history(conn, rule=rule.name, segment=segment)
        span = trend_span(rule)
        view.values = load_scored(conn, rule, segment, start=moment - span, end=moment)
        view.trend = bucket_means(view.values, start=moment - span, span=span, buckets=buckets)
        view.worst = window_evidence(conn, rule, segment, at=moment, limit=worst)
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


def load_history(conn: Connection, *, rule: str, segment: Segment,
                 limit: int = 200) -> list[Transition]:
    """The segment's latest changes of state, oldest first."""
    t = alert_transitions.c
    rows = conn.execute(
        select(t.at, t.previous, t.state, t.events, t.finding)
        .where(t.rule == rule, t.segment_key == segment.key)
        .order_by(t.at.desc(), t.id.desc()).limit(limit)).all()
    return [Transition(at=to_utc(row[0]), previous=row[1], state=row[2],
                       events=tuple(e for e in row[3].split(",") if e), finding=row[4] or {})
            for row in reversed(rows)]


def load_scored(conn: Connection, rule: Rule, segment: Segment, *, start: datetime,
                end: datetime) -> list[tuple[float, datetime]]:
    """The segment's ``(value, sample time)`` pairs with sample times in ``[start, end)``.

    The time range is given on ``verdicts`` as well as on the scores (the same sample
    time), so Postgres can combine the segment's GIN lookup with the verdicts' (metric,
    sample_ts) index and read only the segment's rows of the range; and on both
    tables' partition key (``created_at``), so it reads only the range's partitions.
    """
    spec = rule.spec
    vs, v = verdict_scores.c, verdicts.c
    filters = {key: (value,) if isinstance(value, str) else tuple(value)
               for key, value in spec.filters.items()}
    rows = conn.execute(
        select(vs.value, vs.sample_ts)
        .select_from(verdicts.join(verdict_scores, (vs.verdict_id == v.id)
                                   & (vs.name == spec.series)))
        .where(v.metric == spec.metric, v.sample_ts >= to_utc(start), v.sample_ts < to_utc(end),
               vs.metric == spec.metric, vs.sample_ts >= to_utc(start),
               vs.sample_ts < to_utc(end), v.created_at >= created_since(to_utc(start)),
               vs.created_at >= created_since(to_utc(start)),
               *attributes_match(segment.as_dict(), filters, containment=not is_sqlite(conn))))
    return [(float(value), to_utc(ts)) for value, ts in rows]


def load_trend(conn: Connection, rule: Rule, segment: Segment, *, end: datetime,
               span: timedelta, buckets: int) -> list[Bucket]:
    """The segment's mean score in ``buckets`` equal stretches of ``span`` ending at ``end``."""
    rows = load_scored(conn, rule, segment, start=end - span, end=end)
    return bucket_means(rows, start=end - span, span=span, buckets=buckets)


def bucket_means(rows: list[tuple[float, datetime]], *, start: datetime, span: timedelta,
                 buckets: int) -> list[Bucket]:
    """Mean and count of ``rows`` in ``buckets`` equal stretches of ``span`` from ``start``."""
    width_s = span.total_seconds() / buckets
    sums = [0.0] * buckets
    counts = [0] * buckets
    for value, ts in rows:
        index = int((ts - start).total_seconds() // width_s)
        if 0 <= index < buckets:
            sums[index] += value
            counts[index] += 1
    return [Bucket(start=start + timedelta(seconds=i * width_s), n=counts[i],
                   mean=sums[i] / counts[i] if counts[i] else None) for i in range(buckets)]
