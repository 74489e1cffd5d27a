"""Which metrics a sample is kept for: filters, rate, segment minimum. Pure but for the
segment counts, which live in a :class:`~producers.quota.SegmentQuota`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Literal

from producers import telemetry
from producers.policy import Policy
from producers.quota import SegmentQuota
from producers.sampler import is_sampled

#: Segment label of a sample that has none of the segment attributes.
NO_SEGMENT = "(none)"


@dataclass(frozen=True, slots=True)
class Pick:
    """One metric a sample is kept for, and why."""

    metric: str
    """The metric."""

    kept_by: Literal["rate", "minimum"]
    """``rate``: its id hash fell under the rate; ``minimum``: the segment minimum."""

    rate: float
    """The metric's rate when the sample was picked (backpressure lowers from it)."""

    delay_s: float
    """Delay before judging."""


@dataclass(frozen=True, slots=True)
class Selection:
    """What the policy made of one sample."""

    segment: str
    """The sample's segment label."""

    picks: tuple[Pick, ...]
    """The metrics it is kept for."""

    filtered_out: tuple[str, ...]
    """Metrics whose ``where`` conditions it fails."""

    sampled_out: tuple[str, ...]
    """Metrics whose rate (and segment minimum) left it out."""


def _count_capped(metric: str) -> None:
    # Looked up only when it happens: a labelled child is found under a lock.
    telemetry.SEGMENTS_CAPPED.labels(metric).inc()


def segment_of(attributes: Mapping[str, str], keys: Sequence[str]) -> str:
    """The segment label: ``app=support-bot,route=/chat`` (keys the sample lacks left out)."""
    parts = [f"{key}={attributes[key]}" for key in keys if key in attributes]
    return ",".join(parts) or NO_SEGMENT


def select(
    *, sample_id: str, attributes: Mapping[str, str], metrics: Sequence[str], policy: Policy,
    quota: SegmentQuota, now_s: float, rate: float | None = None,
) -> Selection:
    """Decide which of ``metrics`` keep this sample.

    Args:
        sample_id: The sample id (the rate is applied to its hash).
        attributes: The sample's attributes (filters and segment).
        metrics: The metrics asked for.
        policy: The sampling policy.
        quota: Segment counts for the minimum; updated for each metric the sample
            passes the filters of.
        now_s: Current time, seconds since the epoch.
        rate: A per-call rate overriding the policy's.

    Returns:
        The selection.
    """
    segment = segment_of(attributes, policy.segment_keys)
    picks: list[Pick] = []
    filtered: list[str] = []
    sampled_out: list[str] = []
    for metric in metrics:
        rule = policy.rule_for(metric, rate=rate)
        if not rule.matches(attributes):
            filtered.append(metric)
            continue
        # Count every sample that passes the filters: the minimum is "the first N seen".
        in_minimum = quota.take(metric=metric, segment=segment,
                                minimum=rule.minimum_per_segment,
                                window_s=policy.spec.segments.window_s, now_s=now_s,
                                max_new=policy.spec.segments.max_new,
                                on_capped=partial(_count_capped, metric))
        if is_sampled(sample_id, rule.rate, metric=metric):
            picks.append(Pick(metric, "rate", rule.rate, rule.delay_s))
        elif in_minimum:
            picks.append(Pick(metric, "minimum", rule.rate, rule.delay_s))
        else:
            sampled_out.append(metric)
    return Selection(segment=segment, picks=tuple(picks), filtered_out=tuple(filtered),
                     sampled_out=tuple(sampled_out))
