"""Backpressure: whether a job still goes in when its queue is full. Pure.

Below ``max_queue_depth`` every picked job goes in. At or above it:

- ``drop_new``: nothing goes in until the queue drains below the limit.
- ``lower_rate``: the metric's rate is multiplied by ``limit / depth`` (at twice the
  limit, half the rate), applied to the same hash as the sampling (the metric's, on
  the sampling key), so the jobs kept are a subset of those the full rate keeps and
  sampling stays deterministic. Samples kept by the
  segment minimum still go in: they are few, and they are what keeps small
  segments' alerts alive.

Either way the caller counts what was shed, per metric and segment. Nothing waits.
"""

from __future__ import annotations

from producers.policy import ShedPolicy
from producers.sampler import sampling_fraction
from producers.selector import Pick


def rate_factor(*, depth: int | None, max_depth: int | None, policy: ShedPolicy) -> float:
    """How much of the rate is left at this queue depth.

    Args:
        depth: Jobs in the queue (including those this producer just added), or None
            when unknown.
        max_depth: The queue's limit, or None for none.
        policy: What to do above the limit.

    Returns:
        1.0 below the limit (or with no limit or unknown depth), 0.0 above it under
        ``drop_new``, ``max_depth / depth`` under ``lower_rate``.
    """
    if depth is None or max_depth is None or depth < max_depth:
        return 1.0
    if policy == "drop_new":
        return 0.0
    return max_depth / max(depth, 1)


def keeps(pick: Pick, *, sampling_key: str, factor: float) -> bool:
    """True when the job of ``pick`` goes in at ``factor`` of its rate.

    Args:
        pick: Why the sample was picked for the metric, and at what rate.
        sampling_key: The key the sample was sampled on (its id, or its trace id); its
            hash decides under a lowered rate.
        factor: From :func:`rate_factor`.

    Returns:
        Whether to publish the job.
    """
    if factor >= 1.0:
        return True
    if factor <= 0.0:
        return False
    if pick.kept_by == "minimum":
        return True
    return sampling_fraction(sampling_key, metric=pick.metric) < pick.rate * factor
