"""Reading the fleet's status again and again (``evalfleet status [--watch]``).

Each observation reads the queues and the recent activity and builds a
:class:`~evalfleet.ops.fleet_status.FleetStatus`. Queue readings are kept for about one
window, and arrivals are counted since the oldest of them (completions since then
plus the backlog's change): the longer the monitor runs, the steadier the estimate.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from evalfleet.broker.probe import QueueProbe, QueueReading
from evalfleet.core.message import queue_for
from evalfleet.core.ratelimit import RateLimit
from evalfleet.ops.activity import count_completed, read_activity
from evalfleet.ops.fleet_status import FleetStatus, TierEndpoint, build_status
from evalfleet.store.sql import SqlStore


@dataclass(frozen=True)
class MonitorOptions:
    """What to watch and the assumptions of the recommendations."""

    metrics: tuple[str, ...]
    models: Mapping[str, str]
    """Judge model per metric."""
    limits: Mapping[str, RateLimit]
    """Fleet-wide rate limits per judge model."""
    window_s: float = 300.0
    """Rates, lag and failures are over this many recent seconds."""
    concurrency: int = 256
    """Judge calls in flight per worker process."""
    drain_s: float = 900.0
    """Time the drain recommendation clears backlogs in."""
    identity_window_s: float = 86400.0
    """How far back judge identities are read (a change within it is shown)."""
    endpoints: Mapping[str, tuple[TierEndpoint, ...]] = field(default_factory=dict)
    """A cascade metric's judge tiers and where each is asked, by metric."""


class StatusMonitor:
    """Observes queues and the verdict store; remembers readings for arrival estimates."""

    def __init__(self, *, store: SqlStore, probe: QueueProbe, options: MonitorOptions,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        """Watch through ``store`` and ``probe``."""
        self.store = store
        self.probe = probe
        self.options = options
        self._clock = clock
        self._readings: deque[dict[str, QueueReading]] = deque()

    def sample(self) -> None:
        """Take a queue reading only, as the baseline of the next observation's arrivals."""
        self._remember(self._read_queues())

    def observe(self) -> FleetStatus:
        """Read queues and activity now and build the status."""
        readings = self._read_queues()
        earlier = self._readings[0] if self._readings else {}
        self._remember(readings)
        now = self._clock()
        options = self.options
        activity = read_activity(self.store, metrics=options.metrics,
                                 since=now - timedelta(seconds=options.window_s), until=now)
        since, until = _read_at(earlier), _read_at(readings)
        completed = count_completed(self.store, metrics=options.metrics, since=since,
                                    until=until) if since and until and since < until else {}
        return build_status(
            at=now, window_s=options.window_s, concurrency=options.concurrency,
            drain_s=options.drain_s, readings=readings, earlier=earlier,
            completed_between=completed, activity=activity, models=options.models,
            limits=options.limits, identities=self.store.judge_identities(
                since=now - timedelta(seconds=options.identity_window_s)),
            endpoints=options.endpoints,
        )

    def _read_queues(self) -> dict[str, QueueReading]:
        queues = {queue_for(metric): metric for metric in self.options.metrics}
        found = self.probe.read(list(queues))
        return {metric: found[queue] for queue, metric in queues.items()}

    def _remember(self, readings: dict[str, QueueReading]) -> None:
        self._readings.append(readings)
        newest = _read_at(readings)
        # Keep the oldest reading still inside the window, and everything after it.
        while len(self._readings) > 1 and newest is not None:
            second = _read_at(self._readings[1])
            if second is None or (newest - second).total_seconds() < self.options.window_s:
                break
            self._readings.popleft()


def _read_at(readings: Mapping[str, QueueReading]) -> datetime | None:
    return min((reading.read_at for reading in readings.values()), default=None)
