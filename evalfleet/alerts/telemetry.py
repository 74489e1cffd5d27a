"""Prometheus metrics of the alert engine.

State and mean gauges are served from the last cycle's snapshot by a custom
collector, so segments that disappear leave no stale series behind. Segment
labels are bounded: per rule, only the whole and the ``MAX_SEGMENTS_PER_RULE``
segments with most samples (firing ones first) are exported.

The judge's live agreement with reviewers (the figures of ``evalfleet review status``)
is served the same way, per metric, judge model, score and statistic, with the ends of
its bootstrap interval and the items it rests on.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

#: Segments per rule exported with their means.
MAX_SEGMENTS_PER_RULE = 20

#: Every state a segment can be in (each gets a series, zeros included).
STATES = ("ok", "insufficient_data", "pending", "firing", "resolved", "no_data")


@dataclass(frozen=True)
class SegmentSample:
    """One segment's numbers after a cycle."""

    rule: str
    """The rule."""
    segment: str
    """The segment, as text (``app=support-bot``; ``(all)`` for the whole)."""
    state: str
    """Its state."""
    n: int
    """Samples in its window."""
    mean: float | None
    """The window's mean."""
    baseline_mean: float | None
    """The baseline's mean."""


@dataclass(frozen=True)
class AgreementSample:
    """One score's live agreement figures, for one judge model (or between reviewers)."""

    metric: str
    judge_model: str
    score: str
    items: int
    """Labelled items the figures rest on."""
    statistics: dict[str, tuple[float | None, float | None, float | None]]
    """By statistic name: the value and its interval's low and high ends."""


class AlertTelemetry(Collector):
    """The alert engine's metrics, registered on ``registry``."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self._lock = threading.Lock()
        self._snapshot: dict[str, list[SegmentSample]] = {}
        self._agreement: list[AgreementSample] = []
        self.evaluations = Counter(
            "evalfleet_alert_evaluations_total", "Rule evaluations run.", ["rule"],
            registry=registry)
        self.cycle_seconds = Histogram(
            "evalfleet_alert_cycle_duration_seconds", "Time of one alert evaluation cycle.",
            registry=registry, buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
        self.notifications = Counter(
            "evalfleet_alert_notifications_total",
            "Notification delivery attempts by receiver and outcome.",
            ["receiver", "outcome"], registry=registry)
        self.transitions = Counter(
            "evalfleet_alert_transitions_total", "Notified state transitions.",
            ["rule", "event"], registry=registry)
        registry.register(self)

    def record_cycle(self, samples: Iterable[SegmentSample], *, rules: Sequence[str]) -> None:
        """Replace the snapshot of the given rules with this cycle's numbers."""
        by_rule: dict[str, list[SegmentSample]] = {rule: [] for rule in rules}
        for sample in samples:
            by_rule.setdefault(sample.rule, []).append(sample)
        with self._lock:
            self._snapshot.update(by_rule)

    def record_agreement(self, samples: Sequence[AgreementSample]) -> None:
        """Replace the agreement figures with these."""
        with self._lock:
            self._agreement = list(samples)

    def collect(self) -> Iterator[Metric]:
        """Yield the gauges from the last snapshot (called by the Prometheus client)."""
        states = GaugeMetricFamily("evalfleet_alert_segments",
                                   "Segments per rule in each alert state.",
                                   labels=["rule", "state"])
        means = GaugeMetricFamily("evalfleet_alert_window_mean",
                                  "Mean score in the current window.", labels=["rule", "segment"])
        baselines = GaugeMetricFamily("evalfleet_alert_baseline_mean",
                                      "Mean score in the baseline.", labels=["rule", "segment"])
        counts = GaugeMetricFamily("evalfleet_alert_window_samples",
                                   "Samples in the current window.", labels=["rule", "segment"])
        with self._lock:
            snapshot = {rule: list(samples) for rule, samples in self._snapshot.items()}
        for rule, samples in sorted(snapshot.items()):
            for state in STATES:
                states.add_metric([rule, state], sum(1 for s in samples if s.state == state))
            for sample in _exported(samples):
                counts.add_metric([rule, sample.segment], sample.n)
                if sample.mean is not None:
                    means.add_metric([rule, sample.segment], sample.mean)
                if sample.baseline_mean is not None:
                    baselines.add_metric([rule, sample.segment], sample.baseline_mean)
        yield from (states, means, baselines, counts)
        yield from self._collect_agreement()

    def _collect_agreement(self) -> Iterator[Metric]:
        labels = ["metric", "judge_model", "score"]
        families = [GaugeMetricFamily(f"evalfleet_review_agreement{suffix}", text,
                                      labels=[*labels, "statistic"])
                    for suffix, text in (
                        ("", "Judge-versus-reviewer agreement over the rolling window "
                             "(random items, weighted by inclusion probability)."),
                        ("_low", "Low end of the agreement's bootstrap 95% interval."),
                        ("_high", "High end of the agreement's bootstrap 95% interval."))]
        items = GaugeMetricFamily("evalfleet_review_agreement_items",
                                  "Labelled items the agreement figures rest on.", labels=labels)
        with self._lock:
            samples = list(self._agreement)
        for sample in samples:
            key = [sample.metric, sample.judge_model, sample.score]
            items.add_metric(key, sample.items)
            for name, ends in sample.statistics.items():
                for family, value in zip(families, ends, strict=True):
                    if value is not None:
                        family.add_metric([*key, name], value)
        yield from (*families, items)


def _exported(samples: list[SegmentSample]) -> list[SegmentSample]:
    ranked = sorted(samples, key=lambda s: (s.segment != "(all)", s.state != "firing", -s.n))
    return ranked[: MAX_SEGMENTS_PER_RULE + 1]


_default: AlertTelemetry | None = None
_default_lock = threading.Lock()


def default_alert_telemetry() -> AlertTelemetry:
    """The process-wide instance on the default registry (created on first use)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = AlertTelemetry(REGISTRY)
        return _default
