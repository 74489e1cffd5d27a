"""Every beat round's schedule entry, written once.

``evalfleet beat`` runs several periodic rounds (the alert check, canaries, partitions,
batch judging). Each is a Celery task sent every ``every_s`` seconds to one queue and
routed there, and each send expires after its own interval: a round nobody ran in time
is worthless, the next one does the same work.
"""

from __future__ import annotations

from typing import Any

from celery import Celery


def schedule_round(app: Celery, *, entry: str, task: str, every_s: float, queue: str) -> None:
    """Schedule ``task`` on ``app``'s beat every ``every_s`` seconds, sent to ``queue``.

    Args:
        app: The Celery app.
        entry: The beat schedule entry's name.
        task: The task's name.
        every_s: Seconds between sends; a send expires after as long.
        queue: The queue the task is sent and routed to.
    """
    schedule: dict[str, Any] = dict(app.conf.beat_schedule or {})
    schedule[entry] = {"task": task, "schedule": every_s,
                       "options": {"queue": queue, "expires": every_s}}
    app.conf.beat_schedule = schedule
    routes: dict[str, Any] = dict(app.conf.task_routes or {})
    routes[task] = {"queue": queue}
    app.conf.task_routes = routes
