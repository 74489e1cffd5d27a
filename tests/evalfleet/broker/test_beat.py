"""Every beat round is scheduled and routed by one helper."""

from __future__ import annotations

from celery import Celery

from evalfleet.broker.beat import schedule_round


def test_a_round_is_sent_to_its_queue_and_expires_after_its_interval() -> None:
    app = Celery("beat-test")
    app.conf.beat_schedule = {"other": {"task": "other.task", "schedule": 5.0}}
    schedule_round(app, entry="rounds", task="rounds.task", every_s=30.0, queue="beat.q")
    assert app.conf.beat_schedule["rounds"] == {
        "task": "rounds.task", "schedule": 30.0,
        "options": {"queue": "beat.q", "expires": 30.0}}
    assert app.conf.beat_schedule["other"]["task"] == "other.task"  # kept
    assert app.conf.task_routes["rounds.task"] == {"queue": "beat.q"}
