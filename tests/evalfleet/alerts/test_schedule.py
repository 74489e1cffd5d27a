"""The beat schedule: the alert task registered on the given app, routed to its queue."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

from evalfleet.alerts.schedule import (
    ALERT_QUEUE,
    ALERT_TASK,
    CANARY_SCHEDULE_ENTRY,
    CANARY_TASK,
    PARTITION_SCHEDULE_ENTRY,
    PARTITION_TASK,
    SCHEDULE_ENTRY,
    register_alert_beat,
    register_canary_beat,
    register_partition_beat,
)
from evalfleet.core.settings import Settings
from evalfleet.store import open_store
from evalfleet.store.partitions import DAYS_AHEAD, day_start, day_suffix, drop_partition
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


def test_the_alert_task_evaluates_at_the_last_whole_minute(tmp_path: Path,
                                                           database_url: str) -> None:
    settings = Settings(data_dir=tmp_path, database_url=database_url)
    app = create_app(settings, concurrency=1)
    register_alert_beat(app, settings)
    before = datetime.now(UTC)
    assert app.tasks[ALERT_TASK]().endswith("rules skipped")
    after = datetime.now(UTC)
    store = open_store(database_url)
    with store.engine.connect() as conn:
        runs = conn.exec_driver_sql("SELECT evaluated_at FROM alert_rule_runs").scalars().all()
    store.close()
    assert runs  # the shipped rules (intervals of whole minutes) ran
    for evaluated_at in runs:
        assert evaluated_at.second == 0 and evaluated_at.microsecond == 0
        assert before - timedelta(minutes=1) < evaluated_at <= after


def test_the_canary_task_feeds_on_its_own_interval_and_only_when_on(tmp_path: Path) -> None:
    fed: list[datetime] = []

    def feed(at: datetime) -> SimpleNamespace:
        fed.append(at)
        return SimpleNamespace(slot=1, sent={"rag_qa": 4})

    settings = Settings(data_dir=tmp_path, canary_interval_s=120)
    app = create_app(settings, concurrency=1)
    register_canary_beat(app, settings, feed=feed)
    entry = app.conf.beat_schedule[CANARY_SCHEDULE_ENTRY]
    assert (entry["task"], entry["schedule"], entry["options"]["queue"]) == (
        CANARY_TASK, 120, ALERT_QUEUE)
    assert app.tasks[CANARY_TASK]() == "slot 1: 4 canaries" and len(fed) == 1
    off = Settings(data_dir=tmp_path, canary_interval_s=0)
    quiet = create_app(off, concurrency=1)
    register_canary_beat(quiet, off, feed=feed)
    assert CANARY_TASK not in quiet.tasks
    assert CANARY_SCHEDULE_ENTRY not in (quiet.conf.beat_schedule or {})


def test_the_partition_task_makes_the_days_ahead_again(tmp_path: Path, database_url: str) -> None:
    settings = Settings(data_dir=tmp_path, database_url=database_url)
    app = create_app(settings, concurrency=1)
    register_partition_beat(app, settings)
    assert app.conf.beat_schedule[PARTITION_SCHEDULE_ENTRY]["schedule"] == 3600
    last = day_suffix(day_start(datetime.now(UTC)) + timedelta(days=DAYS_AHEAD))
    store = open_store(database_url)
    with store.engine.begin() as conn:
        drop_partition(conn, last)
    assert app.tasks[PARTITION_TASK]() == "3 partitions created"
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql(f"SELECT to_regclass('verdict_scores_{last}')").scalar()
    store.close()
