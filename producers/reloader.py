"""The sampling config file, re-read when it changes, without a restart.

The file is checked at most once per ``check_interval_s`` (a ``stat``, no read
unless its modification time, size or inode changed). A new version that does
not validate is logged as an error, once per version, and the last good policy
stays in effect: a typo in production never stops sampling or resets it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path

from evalfleet.core.errors import InvalidSamplingConfig
from producers.policy import Fallbacks, Policy, default_policy, parse_policy

logger = logging.getLogger(__name__)

#: Seconds between two looks at the file's modification time.
CHECK_INTERVAL_S = 1.0

#: The version of a file that cannot be read (missing, no permission).
_MISSING = (-1, -1, -1)


class PolicyReloader:
    """Holds the policy in effect and reloads it when its file changes. Thread-safe."""

    def __init__(
        self, path: Path | None, *, fallbacks: Fallbacks, max_delay_s: float | None = None,
        known_metrics: Collection[str] | None = None,
        check_interval_s: float = CHECK_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        on_reload: Callable[[str], None] | None = None,
    ) -> None:
        """Load the file (or the defaults when ``path`` is None).

        Args:
            path: The sampling config file, or None for the defaults.
            fallbacks: Values below the file's ``defaults``.
            max_delay_s: Longest allowed ``delay_s``; None for no check.
            known_metrics: Metric names that exist; None for no check.
            check_interval_s: Least time between two checks of the file.
            clock: Monotonic time source.
            on_reload: Called with ``"ok"`` or ``"invalid"`` after each reload attempt.

        Raises:
            InvalidSamplingConfig: When the file is missing or invalid at start.
        """
        self.path = path
        self._fallbacks = fallbacks
        self._max_delay_s = max_delay_s
        self._known = known_metrics
        self._interval_s = check_interval_s
        self._clock = clock
        self._on_reload = on_reload
        self._lock = threading.Lock()
        self._checked_at = clock()
        self._version: tuple[int, int, int] | None = None
        self._failed_version: tuple[int, int, int] | None = None
        if path is None:
            self._policy = default_policy(fallbacks)
        else:
            self._version = self._stat()
            self._policy = self._load()

    def current(self) -> Policy:
        """The policy in effect, reloading the file first if it changed."""
        if self.path is None or self._clock() - self._checked_at < self._interval_s:
            return self._policy
        with self._lock:
            if self._clock() - self._checked_at >= self._interval_s:
                self._checked_at = self._clock()
                self._maybe_reload()
        return self._policy

    def _maybe_reload(self) -> None:
        error: InvalidSamplingConfig | None = None
        try:
            version = self._stat()
        except InvalidSamplingConfig as exc:
            version, error = _MISSING, exc
        if version in (self._version, self._failed_version):
            return
        if error is None:
            try:
                policy = self._load()
            except InvalidSamplingConfig as exc:
                error = exc
        if error is not None:
            self._failed_version = version
            logger.error("sampling config not reloaded, the previous one stays in effect: %s",
                         error)
            if self._on_reload is not None:
                self._on_reload("invalid")
            return
        self._policy, self._version, self._failed_version = policy, version, None
        logger.info("sampling config reloaded from %s", self.path)
        if self._on_reload is not None:
            self._on_reload("ok")

    def _stat(self) -> tuple[int, int, int]:
        assert self.path is not None
        try:
            stat = os.stat(self.path)
        except OSError as exc:
            raise InvalidSamplingConfig(f"cannot read: {exc.strerror}", path=str(self.path)) \
                from None
        return stat.st_mtime_ns, stat.st_size, stat.st_ino

    def _load(self) -> Policy:
        assert self.path is not None
        try:
            raw = self.path.read_bytes()
        except OSError as exc:
            raise InvalidSamplingConfig(f"cannot read: {exc.strerror}", path=str(self.path)) \
                from None
        return parse_policy(raw, source=str(self.path), fallbacks=self._fallbacks,
                            max_delay_s=self._max_delay_s, known_metrics=self._known)
