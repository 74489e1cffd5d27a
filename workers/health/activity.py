"""What a worker process has been doing: jobs started and finished, queues paused, shutdown.

The evaluate task reports each message it starts and finishes; liveness reads a
:class:`ActivitySnapshot` of it. Times are monotonic seconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class ActivitySnapshot:
    """A worker's activity at one moment (monotonic seconds)."""

    since_s: float
    """When the worker began consuming (or was created, until then)."""
    last_started_s: float | None
    """When it last started a message, or None."""
    last_finished_s: float | None
    """When it last finished one, or None."""
    started: int
    """Messages started since the process began."""
    finished: int
    """Messages finished since the process began."""
    paused: frozenset[str]
    """Queues it stopped consuming on purpose (the judge refuses access)."""
    draining: bool
    """True once shutdown began."""

    @property
    def running(self) -> int:
        """Messages started and not yet finished."""
        return self.started - self.finished

    def last_progress_s(self) -> float:
        """The last time the worker started or finished a message, or began consuming."""
        return max(t for t in (self.since_s, self.last_started_s, self.last_finished_s)
                   if t is not None)


class WorkerActivity:
    """Counts a worker's messages as they start and finish. Thread-safe.

    Args:
        clock: Monotonic seconds.
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._since_s = clock()
        self._last_started_s: float | None = None
        self._last_finished_s: float | None = None
        self._started = 0
        self._finished = 0
        self._paused_until: dict[str, float] = {}
        self._draining = False

    def consuming(self) -> None:
        """The worker is ready and consumes its queues: the stall clock starts now."""
        with self._lock:
            self._since_s = self._clock()

    def started(self) -> None:
        """A message started."""
        with self._lock:
            self._started += 1
            self._last_started_s = self._clock()

    def finished(self) -> None:
        """A message finished (whatever became of it)."""
        with self._lock:
            self._finished += 1
            self._last_finished_s = self._clock()

    def pause(self, queue: str, *, for_s: float) -> None:
        """The worker stopped consuming ``queue`` for ``for_s`` seconds on purpose."""
        with self._lock:
            self._paused_until[queue] = self._clock() + for_s

    def drain(self) -> None:
        """Shutdown began."""
        with self._lock:
            self._draining = True

    def snapshot(self) -> ActivitySnapshot:
        """The activity now."""
        with self._lock:
            now = self._clock()
            return ActivitySnapshot(
                since_s=self._since_s, last_started_s=self._last_started_s,
                last_finished_s=self._last_finished_s, started=self._started,
                finished=self._finished,
                paused=frozenset(_still_paused(self._paused_until.items(), now=now)),
                draining=self._draining,
            )


def _still_paused(pauses: Iterable[tuple[str, float]], *, now: float) -> list[str]:
    return [queue for queue, until in pauses if until > now]
