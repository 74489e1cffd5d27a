"""Is a worker live? Pure decisions over its activity and its queues' depths.

A worker is not live when work waits for it and it does nothing about it: its
(unpaused) queues hold messages, yet it neither started nor finished one for
``stall_s`` seconds. With a free task slot a consuming worker starts a waiting
message at once, and with every slot busy some job finishes within two judge
calls, so ``stall_s`` above two judge calls never flags a slow but working
worker. Restarting helps a stuck consumer; it does not help a broker outage, so
a worker that cannot read its queues' depths is reported live (readiness says
why), as is a worker that is shutting down or paused on purpose.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from workers.health.activity import ActivitySnapshot


@dataclass(frozen=True)
class Liveness:
    """The answer of ``/livez``. Build with the named constructors."""

    live: bool
    reason: str
    waiting: dict[str, int] = field(default_factory=dict)
    """Messages waiting per queue, when they were read."""

    @classmethod
    def alive(cls, reason: str, *, waiting: Mapping[str, int] | None = None) -> Liveness:
        """The worker is live."""
        return cls(True, reason, dict(waiting or {}))

    @classmethod
    def stalled(cls, reason: str, *, waiting: Mapping[str, int]) -> Liveness:
        """Work waits and the worker does nothing about it."""
        return cls(False, reason, dict(waiting))


def needs_depths(activity: ActivitySnapshot, *, now_s: float, stall_s: float) -> bool:
    """True when the answer depends on the queues' depths (worth a broker round trip).

    Args:
        activity: The worker's activity.
        now_s: Monotonic seconds now.
        stall_s: How long without progress counts as stalled.
    """
    return not activity.draining and now_s - activity.last_progress_s() >= stall_s


def assess_liveness(
    activity: ActivitySnapshot, *, now_s: float, stall_s: float,
    depths: Mapping[str, int] | None, depth_error: str = "",
) -> Liveness:
    """Decide whether a worker is live.

    Args:
        activity: The worker's activity.
        now_s: Monotonic seconds now.
        stall_s: How long without a started or finished message counts as stalled.
        depths: Messages waiting per consumed queue; None when they could not be read.
        depth_error: Why they could not be read.

    Returns:
        The decision and its reason.
    """
    if activity.draining:
        return Liveness.alive("shutting down")
    idle_s = now_s - activity.last_progress_s()
    if idle_s < stall_s:
        return Liveness.alive(f"last progress {idle_s:.0f} s ago")
    if depths is None:
        return Liveness.alive(f"queue depths unknown ({depth_error or 'broker unreachable'})")
    waiting = {queue: depth for queue, depth in depths.items()
               if depth > 0 and queue not in activity.paused}
    if not waiting:
        return Liveness.alive("no work waiting", waiting=depths)
    queues = ", ".join(f"{queue} ({depth})" for queue, depth in sorted(waiting.items()))
    return Liveness.stalled(
        f"messages wait in {queues} but no job started or finished for {idle_s:.0f} s "
        f"(limit {stall_s:g} s; {activity.running} running)", waiting=depths)
