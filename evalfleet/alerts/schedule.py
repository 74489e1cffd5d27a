"""The periodic alert check as a Celery beat task.

Beat sends ``evalfleet.alerts.check`` every ``EVALFLEET_ALERT_TICK_S`` seconds to
the ``evalfleet.alerts`` queue; the task runs one cycle, in which each rule is
evaluated only if its own interval has come round. The cycle evaluates at the last
whole minute (``evalfleet.alerts.cover.settled_at``): its windows then end on rollup
buckets and no score row is read, whatever the traffic; samples of the current minute
count from the next cycle on. Before the cycle the task folds the rollups' shards of
past buckets into one row each (``evalfleet.store.rollup.fold``), so the cycle reads
one row per bucket and segment. Two beats, or a beat and a
cron job, are safe: a rule is evaluated once per cycle slot, and each transition
is notified once (see ``evalfleet.alerts.ledger``).

Beat also sends ``evalfleet.canaries.feed`` every ``EVALFLEET_CANARY_INTERVAL_S``
seconds to the same queue: the task feeds each metric's queue its drift canaries
for the interval (``evalfleet.calibration.canary``). Two beats feed the same slot
under the same ids, so each canary is judged once.

And beat sends ``evalfleet.store.partitions`` every hour: the task creates the verdict
tables' daily partitions a week ahead on a partitioned Postgres store
(``evalfleet.store.partitions``), so rows never wait on a missing partition.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from celery import Celery

from evalfleet.alerts.cover import settled_at
from evalfleet.alerts.engine import AlertEngine
from evalfleet.alerts.factory import open_alert_engine
from evalfleet.alerts.telemetry import default_alert_telemetry
from evalfleet.broker.beat import schedule_round
from evalfleet.core.settings import Settings
from evalfleet.store import SqlStore, open_store
from evalfleet.store.partitions import MAINTENANCE_INTERVAL_S, maintain
from evalfleet.store.rollup import fold
from evalfleet.store.sql import unavailable_as_store_error

logger = logging.getLogger(__name__)

#: Name of the periodic task.
ALERT_TASK = "evalfleet.alerts.check"

#: Queue the periodic task is sent to (consumed by ``evalfleet beat``).
ALERT_QUEUE = "evalfleet.alerts"

#: Name of the beat schedule entry.
SCHEDULE_ENTRY = "evalfleet-alerts"

#: Name of the periodic canary task.
CANARY_TASK = "evalfleet.canaries.feed"

#: Name of its beat schedule entry.
CANARY_SCHEDULE_ENTRY = "evalfleet-canaries"

#: Name of the periodic partition task.
PARTITION_TASK = "evalfleet.store.partitions"

#: Name of its beat schedule entry.
PARTITION_SCHEDULE_ENTRY = "evalfleet-partitions"


def register_alert_beat(app: Celery, settings: Settings) -> None:
    """Register the alert check task on ``app`` and schedule it every ``alert_tick_s``.

    The engine (rules, receivers, database) is built on the first run, in the process
    that runs the task, and reused.

    Args:
        app: The Celery app (``workers.app.create_app``).
        settings: The settings.
    """
    holder = _LazyEngine(settings)

    # shared=False: the task belongs to this app only.
    @app.task(name=ALERT_TASK, shared=False, ignore_result=True, acks_late=False)
    def check_alerts() -> str:
        """Evaluate the rules that are due and deliver notifications."""
        engine = holder.get()
        now = datetime.now(UTC)
        with unavailable_as_store_error(), engine.store.begin() as conn:
            fold(conn, now=now)
        report = engine.check(at=settled_at(
            now, intervals=[rule.spec.interval for rule in engine.rules.rules]))
        return (f"{len(report.rows)} segments, {len(report.events)} notifications, "
                f"{len(report.skipped)} rules skipped")

    # A tick nobody ran in time is worthless: the next one evaluates the same data.
    schedule_round(app, entry=SCHEDULE_ENTRY, task=ALERT_TASK, every_s=settings.alerts.alert_tick_s,
                   queue=ALERT_QUEUE)


def register_canary_beat(app: Celery, settings: Settings, *,
                         feed: Callable[[datetime], Any]) -> None:
    """Register the canary task on ``app`` and schedule it every ``canary_interval_s``.

    Nothing is registered when ``canary_interval_s`` is 0 (canaries off).

    Args:
        app: The Celery app.
        settings: The settings.
        feed: Sends the canaries of the interval a time falls in
            (``evalfleet.calibration.canary.CanaryFeeder.feed``).
    """
    if not settings.alerts.canary_interval_s:
        return

    @app.task(name=CANARY_TASK, shared=False, ignore_result=True, acks_late=False)
    def feed_canaries() -> str:
        """Feed each metric's queue the canaries of this interval."""
        report = feed(datetime.now(UTC))
        logger.info("canaries of slot %s sent: %s", report.slot, report.sent)
        return f"slot {report.slot}: {sum(report.sent.values())} canaries"

    # A slot fed late is still worth feeding within its own interval, not after.
    schedule_round(app, entry=CANARY_SCHEDULE_ENTRY, task=CANARY_TASK,
                   every_s=settings.alerts.canary_interval_s, queue=ALERT_QUEUE)


def register_partition_beat(app: Celery, settings: Settings) -> None:
    """Register the partition task on ``app`` and schedule it every
    ``MAINTENANCE_INTERVAL_S`` (a no-op on SQLite).

    Args:
        app: The Celery app.
        settings: The settings (the database URL).
    """
    holder: list[SqlStore] = []

    @app.task(name=PARTITION_TASK, shared=False, ignore_result=True, acks_late=False)
    def create_partitions() -> str:
        """Create the next days' partitions of the verdict tables."""
        if not holder:
            holder.append(open_store(settings.resolved_database_url(), pool_size=1))
        created = maintain(holder[0].engine, now=datetime.now(UTC))
        logger.info("partitions created: %s", ", ".join(created) or "none needed")
        return f"{len(created)} partitions created"

    schedule_round(app, entry=PARTITION_SCHEDULE_ENTRY, task=PARTITION_TASK,
                   every_s=MAINTENANCE_INTERVAL_S, queue=ALERT_QUEUE)


class _LazyEngine:
    """Builds the alert engine on first use, once per process."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._engine: AlertEngine | None = None
        self._lock = threading.Lock()

    def get(self) -> AlertEngine:
        with self._lock:
            if self._engine is None:
                self._engine = open_alert_engine(self._settings,
                                                 telemetry=default_alert_telemetry())
            return self._engine
