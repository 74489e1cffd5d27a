"""The periodic alert check as a Celery beat task.

Beat sends ``evalfleet.alerts.check`` every ``EVALFLEET_ALERT_TICK_S`` seconds to
the ``evalfleet.alerts`` queue; the task runs one cycle, in which each rule is
evaluated only if its own interval has come round. Two beats, or a beat and a
cron job, are safe: a rule is evaluated once per cycle slot, and each transition
is notified once (see ``evalfleet.alerts.ledger``).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import Celery

from evalfleet.alerts.engine import AlertEngine
from evalfleet.alerts.factory import open_alert_engine
from evalfleet.alerts.telemetry import default_alert_telemetry
from evalfleet.core.settings import Settings

logger = logging.getLogger(__name__)

#: Name of the periodic task.
ALERT_TASK = "evalfleet.alerts.check"

#: Queue the periodic task is sent to (consumed by ``evalfleet beat``).
ALERT_QUEUE = "evalfleet.alerts"

#: Name of the beat schedule entry.
SCHEDULE_ENTRY = "evalfleet-alerts"


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
        report = holder.get().check()
        return (f"{len(report.rows)} segments, {len(report.events)} notifications, "
                f"{len(report.skipped)} rules skipped")

    schedule: dict[str, Any] = dict(app.conf.beat_schedule or {})
    schedule[SCHEDULE_ENTRY] = {
        "task": ALERT_TASK, "schedule": settings.alert_tick_s,
        # A tick nobody ran in time is worthless: the next one evaluates the same data.
        "options": {"queue": ALERT_QUEUE, "expires": settings.alert_tick_s},
    }
    app.conf.beat_schedule = schedule
    routes: dict[str, Any] = dict(app.conf.task_routes or {})
    routes[ALERT_TASK] = {"queue": ALERT_QUEUE}
    app.conf.task_routes = routes


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
