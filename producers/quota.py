"""Minimum samples per segment: the first N of each segment in each window are kept.

Low-volume segments (a new route, a rarely used model) would otherwise get too few
verdicts at a low rate for their alerts to mean anything. Windows are aligned to
the epoch (``window_s`` 3600: every hour on the hour), so producers agree on them.

The state is bounded: at most ``max_tracked`` (metric, segment) pairs are counted;
past that, the least recently seen pair is forgotten (and would start counting
again). At most ``max_new`` segments per metric start counting in one window: a
sender that varies a segment attribute would otherwise get every sample kept as
"the first of its segment". No I/O; time is an argument.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable


class SegmentQuota:
    """Counts samples per (metric, segment) and window. Thread-safe."""

    def __init__(self, *, max_tracked: int) -> None:
        """Start with no counts.

        Args:
            max_tracked: Most (metric, segment) pairs counted at once.
        """
        self.max_tracked = max_tracked
        self._counts: OrderedDict[tuple[str, str], tuple[int, int]] = OrderedDict()
        self._new: dict[str, tuple[int, int]] = {}
        self.capped: dict[str, int] = {}
        """Samples per metric refused the minimum by the cap on new segments."""
        self._lock = threading.Lock()

    def take(self, *, metric: str, segment: str, minimum: int, window_s: float,
             now_s: float, max_new: int | None = None,
             on_capped: Callable[[], object] | None = None) -> bool:
        """Count one sample of ``segment`` for ``metric``.

        Args:
            metric: The metric.
            segment: The segment label.
            minimum: Samples per window kept whatever the rate.
            window_s: The window length.
            now_s: The current time (seconds since the epoch).
            max_new: Most segments of ``metric`` that start counting in one window
                (None: no cap).
            on_capped: Called when this sample is refused the minimum by that cap.

        Returns:
            True when this sample is among the first ``minimum`` of the window; False
            also for a new segment past ``max_new`` (see :attr:`capped`).
        """
        if minimum <= 0:
            return False
        window = int(now_s // window_s)
        key = (metric, segment)
        with self._lock:
            capped = (key not in self._counts and max_new is not None
                      and not self._admit_new(metric, window, max_new))
            count = 0 if capped else self._count(key, window)
        if capped and on_capped is not None:
            on_capped()
        return not capped and count < minimum

    def _count(self, key: tuple[str, str], window: int) -> int:
        """Count one sample of ``key``; the count before it, this window."""
        seen_window, count = self._counts.pop(key, (window, 0))
        if seen_window != window:
            count = 0
        self._counts[key] = (window, count + 1)
        while len(self._counts) > self.max_tracked:
            self._counts.popitem(last=False)
        return count

    def _admit_new(self, metric: str, window: int, max_new: int) -> bool:
        seen_window, started = self._new.get(metric, (window, 0))
        if seen_window != window:
            started = 0
        if started >= max_new:
            self.capped[metric] = self.capped.get(metric, 0) + 1
            return False
        self._new[metric] = (window, started + 1)
        return True

    def resize(self, max_tracked: int) -> None:
        """Change the bound (a reloaded config), forgetting the oldest pairs if needed."""
        with self._lock:
            self.max_tracked = max_tracked
            while len(self._counts) > max_tracked:
                self._counts.popitem(last=False)

    def __len__(self) -> int:
        return len(self._counts)
