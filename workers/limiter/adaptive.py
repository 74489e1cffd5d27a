"""An adaptive limit of judge calls in flight: additive increase, multiplicative decrease. Pure.

A server that serves N calls at once answers the first N in its service time and queues
the rest; their latency grows with the queue until they time out. So the latency the
calls see, against the lowest seen lately (the floor: a call that did not queue), says
whether the limit is above what the server sustains. Each answer near the floor raises
the limit by 1 / limit (one call per round trip of the whole limit); a latency above
``tolerance`` x the floor, a timeout or an overload answer (429, 5xx) cuts it by
``backoff``, at most once per round trip, so one burst of slow answers counts once.
Until the first cut it starts slow, as TCP does: +1 per answer, doubling each round trip.

Why AIMD rather than a gradient limiter (which scales the limit by floor / latency on
every sample): a judge's latency varies with the length of each answer, not only with
queueing, so a single sample is a noisy signal. AIMD acts on a threshold and moves by
one call per round trip, which that noise barely moves, and several workers running it
against one server converge to a fair share (the classic AIMD result) where ratio
updates chase each other. The cost: it probes above the server's capacity by design
and backs off, so it runs a little below the best fixed limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

#: Share of the limit kept on a decrease: gentle, since a cut below the server's slots
#: leaves them idle until the limit grows back (0.7 cost 10% of the throughput at 8 slots).
BACKOFF = 0.9

#: Latency above this many floors counts as queueing in the server.
TOLERANCE = 1.5

#: Answers per window of the floor: the floor is the lowest latency of this window and
#: the last. Long, because a limit held just above the server's slots never sees an
#: unqueued call again, and a short window would let queued latencies become the floor
#: (the limit then creeps up). The cost: a judge whose answers get slower for good (a new
#: model) is learnt only after up to two windows, the limit held low meanwhile.
FLOOR_WINDOW = 5000


@dataclass
class Aimd:
    """The limit of one endpoint and model. Not thread-safe: use from one event loop.

    Args:
        max_limit: The limit never goes above this.
        limit: Where it starts.
    """

    max_limit: int
    limit: float = 1.0
    min_limit: int = 1
    floor_s: float | None = None
    """The lowest latency seen lately: a call that did not queue."""
    _window_min_s: float = field(default=math.inf, repr=False)
    _last_window_min_s: float = field(default=math.inf, repr=False)
    _window_count: int = field(default=0, repr=False)
    _last_cut_s: float = field(default=-math.inf, repr=False)
    _slow_start: bool = field(default=True, repr=False)

    @property
    def current(self) -> int:
        """The limit, in calls."""
        return max(self.min_limit, min(self.max_limit, int(self.limit)))

    def observe(self, latency_s: float, *, overloaded: bool, now_s: float) -> None:
        """Learn from one finished call.

        Args:
            latency_s: Its time at the judge.
            overloaded: It timed out or was refused for load (429, 5xx).
            now_s: Monotonic seconds.
        """
        if not overloaded:
            self._learn_floor(latency_s)
        floor_s = self.floor_s if self.floor_s is not None else latency_s
        if overloaded or latency_s > TOLERANCE * floor_s:
            if now_s - self._last_cut_s >= TOLERANCE * floor_s:
                self.limit = max(float(self.min_limit), self.limit * BACKOFF)
                self._last_cut_s, self._slow_start = now_s, False
        else:
            step = 1.0 if self._slow_start else 1.0 / max(self.limit, 1.0)
            self.limit = min(float(self.max_limit), self.limit + step)

    def _learn_floor(self, latency_s: float) -> None:
        self._window_min_s = min(self._window_min_s, latency_s)
        self._window_count += 1
        if self._window_count >= FLOOR_WINDOW:
            self._last_window_min_s, self._window_min_s = self._window_min_s, math.inf
            self._window_count = 0
        self.floor_s = min(self._window_min_s, self._last_window_min_s)
