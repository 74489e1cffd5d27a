"""What a sequential rule can see at a segment's traffic, and what it would take to see
more (``evalfleet alerts plan``). Pure: a rule and per-segment summaries in, figures out.

The figures follow the detector's own arithmetic (``edetector.detection_cycles``): a
sustained drop δ below the baseline's mean, less the baseline's bound, grows the best bet
of the grid by about ``λδ - λ²(σ² + δ²)/2`` a sample, and the alarm comes when that sum
reaches the rule's alarm level. They are expectations for a steady drop at steady traffic,
not guarantees; the false alarm figures are the guarantee's bounds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from evalfleet.alerts.edetector import baseline_radius, detection_cycles, oriented
from evalfleet.alerts.rule import PinnedBaseline, Rule, TrailingBaseline
from evalfleet.alerts.sequential import level_of
from evalfleet.alerts.statistic import Summary

#: One month, for false alarm figures.
MONTH = timedelta(days=30)

#: Smallest drop the search considers, and the largest sampling multiple it proposes.
_DROP_FLOOR = 0.001
_MOST_MULTIPLE = 1000.0


@dataclass(frozen=True)
class SegmentPlan:
    """One segment's figures."""

    samples_per_minute: float
    """Judged samples a minute in the look-back."""
    mean: float
    """Its mean over the look-back."""
    false_alarms_per_month: float
    """Upper bound of the segment's expected false alarms a month (all its tests)."""
    smallest_drop_hour: float | None
    """Smallest sustained drop detected within an hour, on average; None: none is."""
    smallest_drop_day: float | None
    """The same within a day."""
    needed_per_minute: float | None
    """Judged samples a minute that would detect the asked drop within the asked delay;
    None when no sampling rate would (the drop is larger than the mean allows)."""


def plan_segment(rule: Rule, recent: Summary, *, span: timedelta, drop: float,
                 within: timedelta) -> SegmentPlan:
    """The figures of one segment at its recent traffic.

    Args:
        rule: A rule (its sequential settings are used whatever its ``test``).
        recent: The segment's values over the look-back.
        span: The look-back's length.
        drop: The drop asked about (on the 0..1 scale).
        within: The delay asked about.

    Returns:
        The segment's plan.
    """
    spec = rule.spec
    level = level_of(rule)
    streams_per_segment = int(spec.uses_baseline) + int(spec.threshold is not None
                                                        and spec.uses_threshold)
    per_minute = recent.n / (span / timedelta(minutes=1)) if span > timedelta(0) else 0.0
    mean = oriented(recent, spec.direction).mean if recent.n else math.nan
    variance = recent.variance
    cycles_per_month = MONTH / spec.interval
    false_alarms = max(1, streams_per_segment) * cycles_per_month / level

    def cycles_to_detect(size: float, rate: float) -> float:
        return _cycles(rule, size=size, rate=rate, mean=mean, variance=variance, level=level)

    def within_delay(delay: timedelta) -> Callable[[float], bool]:
        return lambda size: cycles_to_detect(size, per_minute) <= delay / spec.interval

    hour = _smallest_drop(within_delay(timedelta(hours=1)), mean)
    day = _smallest_drop(within_delay(timedelta(days=1)), mean)
    needed = _needed_rate(lambda rate: cycles_to_detect(drop, rate) <= within / spec.interval,
                          current=per_minute)
    return SegmentPlan(samples_per_minute=per_minute, mean=mean,
                       false_alarms_per_month=false_alarms, smallest_drop_hour=hour,
                       smallest_drop_day=day, needed_per_minute=needed)


def rule_false_alarms_per_month(rule: Rule) -> float:
    """Upper bound of the rule's expected false alarms a month, all segments together."""
    return MONTH / rule.spec.run_length


def _cycles(rule: Rule, *, size: float, rate: float, mean: float, variance: float,
            level: float) -> float:
    spec = rule.spec
    if not math.isfinite(mean) or rate <= 0:
        return math.inf
    per_cycle = rate * (spec.interval / timedelta(minutes=1))
    half = 0.0
    if spec.uses_baseline:
        length = (spec.baseline.window
                  if isinstance(spec.baseline, TrailingBaseline | PinnedBaseline)
                  else timedelta(days=1))
        baseline_n = rate * (length / timedelta(minutes=1))
        half = baseline_radius(baseline_n, variance=variance)
    return detection_cycles(drop=size, mean=mean, variance=variance,
                            samples_per_cycle=per_cycle, level=level,
                            min_effect=spec.min_effect, half_width=half)


def _smallest_drop(detected: Callable[[float], bool], mean: float) -> float | None:
    if not math.isfinite(mean) or mean <= _DROP_FLOOR or not detected(mean):
        return None
    low, high = _DROP_FLOOR, mean
    if detected(low):
        return low
    for _ in range(40):
        middle = (low + high) / 2
        low, high = (low, middle) if detected(middle) else (middle, high)
    return high


def _needed_rate(detected: Callable[[float], bool], *, current: float) -> float | None:
    base = current if current > 0 else 1.0
    high = base * _MOST_MULTIPLE
    if not detected(high):
        return None
    low = base / _MOST_MULTIPLE
    if detected(low):
        return low
    for _ in range(50):
        middle = math.sqrt(low * high)
        low, high = (low, middle) if detected(middle) else (middle, high)
    return high
