"""An adaptive limit of judge calls in flight: additive increase, multiplicative decrease. Pure.

A server that serves S calls at once answers the first S in its service time and queues
the rest; their latency grows with the queue until they time out. So the latency the
calls see, against the lowest seen lately (the floor: a call that did not queue), says
whether the limit is above what the server sustains.

The rule, one answer at a time:

- An answer within :data:`TOLERANCE` x the floor raises the limit by 1 / limit (one call
  per round trip of the whole limit), but only while the calls in flight use at least
  :data:`USED_SHARE` of it: a limit nobody uses says nothing about the server, and one
  grown idle would let a burst flood it. Until the first cut it starts slow, as TCP
  does: +1 per answer, doubling each round trip.
- A latency above that, averaged over about a round trip's answers (each weighs
  1 / limit), a timeout or an overload answer (429, 503) cuts the limit to
  :data:`BACKOFF` of itself, once per congestion event: only calls sent after the last
  cut count (a call sent before it saw the old limit's queue). So a burst of slow
  answers, or the same queue seen by several workers, counts once. The average keeps a
  single slow answer (a long one, or a worker that did not get the CPU in time) from
  cutting: on a loaded 2-core machine 1% of the answers of a judge at 100 ms came after
  more than 150 ms with no queue at all. In the slow start each answer counts alone, as
  the limit doubles each round trip and a late reaction would overshoot.

The cut is deep enough (1.5 x 0.6 = 0.9 of the server's slots) that after each one the
limit falls a little below what the server serves, so calls that did not queue refresh
the floor every cycle; a gentle cut (0.9) kept the limit above the slots for good, the
floor learnt from queued calls, and the limit crept up window after window. The cost:
for a round trip or so per cycle a slot or two stand idle (under 1% in theory at 8 slots).

The floor is the lowest latency of the current window and the last, a window lasting
:data:`WINDOW_FLOORS` floors: long enough to span a cycle (the limit grows from 0.9 to 1.5
x the slots at one call per round trip), short enough that a judge that becomes slower
for good is learnt within two windows (meanwhile every answer looks slow and the limit
sits low).

Why AIMD rather than a gradient limiter (which scales the limit by floor / latency on
every sample): a judge's latency varies with the length of each answer, not only with
queueing, so a single sample is a noisy signal. AIMD acts on a threshold and moves by
one call per round trip, which that noise barely moves, and several workers moving one
shared limit act as one (each answer counts once, wherever it was seen) where ratio
updates from several workers chase each other.

:class:`Aimd` is the arithmetic for one process; ``workers/limiter/slots.py`` runs the
same in a Lua script for a limit the whole fleet shares in Redis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Share of the limit kept on a decrease.
BACKOFF = 0.6

#: Latency above this many floors counts as queueing in the server.
TOLERANCE = 1.5

#: Length of a window of the floor, in floors.
WINDOW_FLOORS = 200

#: Share of the limit the calls in flight must use for an answer to raise it.
USED_SHARE = 0.5

#: Where a limit starts (a fleet's first calls, or an endpoint idle past the state's life).
START_LIMIT = 1.0


@dataclass
class Aimd:
    """The limit of one endpoint and model. Not thread-safe: use from one event loop.

    Args:
        max_limit: The limit never goes above this.
        limit: Where it starts.
    """

    max_limit: int
    limit: float = START_LIMIT
    slow_start: bool = True
    """True until the first cut."""
    last_cut_s: float = -math.inf
    """When the limit was last cut."""
    window_min_s: float = math.inf
    """The lowest latency of the current window of the floor."""
    last_window_min_s: float = math.inf
    """The lowest latency of the window before."""
    window_start_s: float | None = None
    """When the current window began."""
    average_s: float | None = None
    """The latency of the calls sent since the last cut, averaged over about a round
    trip's answers (each weighs 1 / limit; in the slow start, the last one alone)."""

    @property
    def current(self) -> int:
        """The limit, in calls."""
        return max(1, min(self.max_limit, int(self.limit)))

    @property
    def floor_s(self) -> float | None:
        """The lowest latency seen lately: a call that did not queue."""
        floor_s = min(self.window_min_s, self.last_window_min_s)
        return None if math.isinf(floor_s) else floor_s

    def observe(self, latency_s: float, *, overloaded: bool, now_s: float,
                in_flight: int) -> None:
        """Learn from one finished call.

        Args:
            latency_s: Its time at the judge.
            overloaded: It timed out or was refused for load (429, 503).
            now_s: When it finished (seconds on one clock, shared by every reporter).
            in_flight: Calls in flight when it finished, itself included.
        """
        if self.window_start_s is None:
            self.window_start_s = now_s
        if not overloaded:
            self.window_min_s = min(self.window_min_s, latency_s)
        floor_s = self.floor_s if self.floor_s is not None else latency_s
        if now_s - self.window_start_s >= WINDOW_FLOORS * floor_s:
            self.last_window_min_s, self.window_min_s = self.window_min_s, math.inf
            self.window_start_s = now_s
        if now_s - latency_s <= self.last_cut_s:
            return  # sent before the last cut: it saw the old limit's queue
        if not overloaded:
            weight = 1.0 if self.slow_start else 1.0 / max(self.limit, 1.0)
            self.average_s = latency_s if self.average_s is None else (
                self.average_s + weight * (latency_s - self.average_s))
        if overloaded or (self.average_s or 0.0) > TOLERANCE * floor_s:
            self.limit = max(1.0, self.limit * BACKOFF)
            self.last_cut_s, self.slow_start, self.average_s = now_s, False, None
        elif in_flight >= USED_SHARE * self.limit:
            self.limit += 1.0 if self.slow_start else 1.0 / max(self.limit, 1.0)
        self.limit = min(float(self.max_limit), self.limit)
