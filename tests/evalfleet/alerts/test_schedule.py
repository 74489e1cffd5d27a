"""The beat schedule: the alert task registered on the given app, routed to its queue."""

from __future__ import annotations

from pathlib import Path

from evalfleet.alerts.schedule import ALERT_QUEUE, ALERT_TASK, SCHEDULE_ENTRY, register_alert_beat
from evalfleet.core.settings import Settings
from workers.app import create_app


def test_register_alert_beat_adds_the_task_and_its_schedule(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, alert_tick_s=20)
    app = create_app(settings, concurrency=1)
    register_alert_beat(app, settings)
    assert ALERT_TASK in app.tasks
    entry = app.conf.beat_schedule[SCHEDULE_ENTRY]
    assert entry["task"] == ALERT_TASK and entry["schedule"] == 20
    assert entry["options"]["queue"] == ALERT_QUEUE
    assert app.conf.task_routes[ALERT_TASK] == {"queue": ALERT_QUEUE}
    other = create_app(settings, concurrency=1)
    assert ALERT_TASK not in other.tasks  # shared=False: only the app it was given
