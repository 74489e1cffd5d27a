"""Deduplication in this process's memory: a bounded, time-limited set."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from producers.dedupe.base import Deduper


class MemoryDeduper(Deduper):
    """An LRU of job keys with the time they were marked. Thread-safe.

    Beyond ``max_keys`` the oldest keys are forgotten early, so memory stays
    bounded at the cost of letting a very old repeat through.
    """

    def __init__(self, *, window_s: float, max_keys: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """An empty set.

        Args:
            window_s: How long a key is remembered; 0 turns deduplication off.
            max_keys: Most keys remembered.
            clock: Monotonic time source.
        """
        self._window_s = window_s
        self._max_keys = max_keys
        self._clock = clock
        self._marked: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def seen(self, keys: Sequence[str]) -> list[bool]:
        """See :meth:`Deduper.seen`; never raises."""
        with self._lock:
            self._expire(self._clock())
            return [key in self._marked for key in keys]

    def mark(self, keys: Sequence[str]) -> None:
        """See :meth:`Deduper.mark`; never raises."""
        if self._window_s <= 0:
            return
        now = self._clock()
        with self._lock:
            for key in keys:
                self._marked.pop(key, None)
                self._marked[key] = now
            while len(self._marked) > self._max_keys:
                self._marked.popitem(last=False)

    def _expire(self, now: float) -> None:
        # Keys are in the order they were marked, so the expired ones are at the front.
        while self._marked:
            key, marked_at = next(iter(self._marked.items()))
            if now - marked_at < self._window_s:
                return
            del self._marked[key]
