"""A circuit breaker per judge endpoint: stop calling a judge that is down, probe it. Pure.

Closed: calls go through; ``failure_threshold`` transport failures in a row
(timeouts, refused connections, 5xx; a 429 means the judge is up) open it.
Open: calls are refused until ``open_s`` has passed. Half-open: one probe call
goes through; success closes the circuit, failure opens it again for twice as
long (up to ``max_open_s``). A probe that never reaches the judge (its rate
budget was spent, its task was cancelled) must be handed back with
:meth:`CircuitBreaker.release`, or no other probe could ever go.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

BreakerState = Literal["closed", "open", "half_open"]


@dataclass(frozen=True, slots=True)
class Admission:
    """Whether a call may go now."""

    allowed: bool
    wait_s: float = 0.0
    """When refused: seconds until the next probe may go."""
    probe: bool = False
    """Allowed as the one probe of a half-open circuit."""


class CircuitBreaker:
    """The state of one endpoint. Not thread-safe: use from one event loop."""

    def __init__(self, *, failure_threshold: int = 5, open_s: float = 10.0,
                 max_open_s: float = 120.0) -> None:
        self.failure_threshold = failure_threshold
        self.base_open_s = open_s
        self.max_open_s = max_open_s
        self.state: BreakerState = "closed"
        self._failures = 0
        self._open_s = open_s
        self._opened_at = 0.0
        self._probe_out = False

    def admit(self, now_s: float) -> Admission:
        """May a call go now? In half-open state only one probe is out at a time."""
        if self.state == "closed":
            return Admission(True)
        remaining_s = self._opened_at + self._open_s - now_s
        if self.state == "open" and remaining_s > 0:
            return Admission(False, remaining_s)
        self.state = "half_open"
        if self._probe_out:
            return Admission(False, min(self._open_s, 1.0))
        self._probe_out = True
        return Admission(True, probe=True)

    def release(self, admission: Admission) -> None:
        """The call ``admission`` let through is over. If it was the probe and neither
        :meth:`succeeded` nor :meth:`failed` was told, the next call may probe."""
        if admission.probe and self.state == "half_open":
            self._probe_out = False

    def succeeded(self) -> None:
        """The judge answered (any answer that is not a transport failure, 429 included)."""
        self.state, self._failures, self._probe_out = "closed", 0, False
        self._open_s = self.base_open_s

    def failed(self, now_s: float) -> None:
        """A transport failure: timeout, refused connection, 5xx."""
        if self.state == "half_open":
            self._open_s = min(self.max_open_s, self._open_s * 2)
            self._trip(now_s)
            return
        self._failures += 1
        if self._failures >= self.failure_threshold:
            self._trip(now_s)

    def _trip(self, now_s: float) -> None:
        self.state, self._opened_at, self._probe_out = "open", now_s, False
