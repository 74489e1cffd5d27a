"""Minimum samples per segment: the first N of each segment in each window are kept.

Low-volume segments (a new route, a rarely used model) would otherwise get too few
verdicts at a low rate for their alerts to mean anything. Windows are aligned to
the epoch (``window_s`` 3600: every hour on the hour), so producers agree on them.

The state is bounded: at most ``max_tracked`` (metric, segment) pairs are counted;
past that, the least recently seen pair is forgotten (and would start counting
again). No I/O; time is an argument.
"""

from __future__ import annotations

import threading
from collections import OrderedDict


class SegmentQuota:
    """Counts samples per (metric, segment) and window. Thread-safe."""

    def __init__(self, *, max_tracked: int) -> None:
        """Start with no counts.

        Args:
            max_tracked: Most (metric, segment) pairs counted at once.
        """
        self.max_tracked = max_tracked
        self._counts: OrderedDict[tuple[str, str], tuple[int, int]] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, *, metric: str, segment: str, minimum: int, window_s: float,
             now_s: float) -> bool:
        """Count one sample of ``segment`` for ``metric``.

        Args:
            metric: The metric.
            segment: The segment label.
            minimum: Samples per window kept whatever the rate.
            window_s: The window length.
            now_s: The current time (seconds since the epoch).

        Returns:
            True when this sample is among the first ``minimum`` of the window.
        """
        if minimum <= 0:
            return False
        window = int(now_s // window_s)
        key = (metric, segment)
        with self._lock:
            seen_window, count = self._counts.pop(key, (window, 0))
            if seen_window != window:
                count = 0
            self._counts[key] = (window, count + 1)
            while len(self._counts) > self.max_tracked:
                self._counts.popitem(last=False)
        return count < minimum

    def resize(self, max_tracked: int) -> None:
        """Change the bound (a reloaded config), forgetting the oldest pairs if needed."""
        with self._lock:
            self.max_tracked = max_tracked
            while len(self._counts) > max_tracked:
                self._counts.popitem(last=False)

    def __len__(self) -> int:
        return len(self._counts)
