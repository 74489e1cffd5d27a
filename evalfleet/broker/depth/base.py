"""How many jobs wait in a queue: the interface, and a cache in front of it."""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping

#: Seconds a measured depth is reused before the broker is asked again.
DEPTH_TTL_S = 1.0


class QueueDepth(ABC):
    """Reads the number of jobs waiting in a metric queue."""

    @abstractmethod
    def depth(self, queue: str) -> int | None:
        """Jobs waiting in ``queue``, or None when it cannot be known (no limit applies).

        Never raises for broker trouble: an unknown depth is None, and the publish that
        follows reports the broker's state.
        """

    def close(self) -> None:  # noqa: B027 - most probes hold nothing to release
        """Release the probe's connections."""


class UnknownQueueDepth(QueueDepth):
    """For brokers whose queue length is not read: no limit."""

    def depth(self, queue: str) -> int | None:
        """Always None."""
        return None


class CachedQueueDepth:
    """Reuses a measured depth for ``ttl_s`` and adds what this process published since.

    Thread-safe; the count of this process's own publishes keeps a burst from
    overshooting the limit between two measurements.
    """

    def __init__(self, probe: QueueDepth, *, ttl_s: float = DEPTH_TTL_S,
                 clock: Callable[[], float] = time.monotonic, jobs_per_message: int = 1,
                 jobs_per_queue: Mapping[str, int] | None = None) -> None:
        """Wrap ``probe``.

        Args:
            probe: Where depths are measured, in broker messages.
            ttl_s: How long a measurement is reused.
            clock: Monotonic time source.
            jobs_per_message: Jobs a message carries at most (producers batch them): a
                measured depth counts as that many jobs per message, an upper bound.
            jobs_per_queue: The same for queues whose messages carry another number
                (check metrics' queues).
        """
        self._jobs_per_message = jobs_per_message
        self._jobs_per_queue = dict(jobs_per_queue or {})
        self._probe = probe
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[float, int | None]] = {}

    def depth(self, queue: str) -> int | None:
        """The depth of ``queue``: measured at most once per ``ttl_s``, plus own publishes."""
        now = self._clock()
        with self._lock:
            seen = self._seen.get(queue)
            if seen is not None and now - seen[0] < self._ttl_s:
                return seen[1]
        messages = self._probe.depth(queue)
        measured = None if messages is None else messages * self._jobs_per_queue.get(
            queue, self._jobs_per_message)
        with self._lock:
            # Timed from the end of the probe: an unreachable broker's probe takes its
            # whole connect timeout, and must not be repeated for every record.
            self._seen[queue] = (self._clock(), measured)
        return measured

    def add(self, queue: str, jobs: int) -> None:
        """Count ``jobs`` this process just published to ``queue``."""
        with self._lock:
            seen = self._seen.get(queue)
            if seen is not None and seen[1] is not None:
                self._seen[queue] = (seen[0], seen[1] + jobs)
