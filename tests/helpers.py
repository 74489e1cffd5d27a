"""Helpers for tests: queue contents, a deferring judge, a database outage; polling and
worker processes come from :mod:`testkit.process`, shared with the benchmarks."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg

from evalfleet.core.errors import JudgeDeferred, JudgeError
from evalfleet.core.settings import Settings
from testkit.metrics import cascade_metrics as cascade_metrics
from testkit.process import WorkerProcess as WorkerProcess  # shared with the benchmarks
from testkit.process import wait_until as wait_until
from workers import evaluation
from workers.evaluation import EvaluatorOptions
from workers.judge import JudgeClient, JudgeReply, JudgeRequest


def queued(client: Any, metric: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The ``(job message, task headers)`` waiting in ``eval.<metric>`` on Redis, oldest first."""
    messages = []
    for raw in reversed(client.lrange(f"eval.{metric}", 0, -1)):
        envelope = json.loads(raw)
        args, _, _ = json.loads(base64.b64decode(envelope["body"]))
        message = args[0]
        # A batch message carries several jobs: list each as a job of its own.
        common = {"v": message.get("v"), "metric": message.get("metric")}
        for job in message.get("jobs", [message]):
            messages.append(({**common, **job}, envelope["headers"]))
    return messages


def queued_ids(client: Any, metric: str) -> list[str]:
    """Sample ids of the jobs waiting in ``eval.<metric>``, oldest first."""
    return [job["sample"]["id"] for job, _ in queued(client, metric)]


class DeferringJudge(JudgeClient):
    """Sends nothing: every call is deferred for ``wait_s`` (an open circuit, a spent budget)."""

    def __init__(self, wait_s: float) -> None:
        self.wait_s = wait_s

    def complete_many(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply | JudgeError]:
        return [JudgeDeferred("circuit open", retry_after_s=self.wait_s) for _ in requests]


@contextmanager
def database_outage(database_url: str) -> Iterator[None]:
    """The test database stops taking connections (and drops the open ones) inside the
    block, as a Postgres that went away would; it takes them again afterwards."""
    database = database_url.rsplit("/", 1)[1]
    admin_url = database_url.rsplit("/", 1)[0].replace("+psycopg", "") + "/postgres"
    allow_connections(admin_url, database, allow=False)
    try:
        yield
    finally:
        allow_connections(admin_url, database, allow=True)


def allow_connections(admin_url: str, database: str, *, allow: bool) -> None:
    """Let ``database`` take connections again, or refuse new ones and end the open ones."""
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS {str(allow).lower()}')
        if not allow:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = %s AND pid <> pg_backend_pid()", [database])


def evaluator_options(**settings: Any) -> EvaluatorOptions:
    """The evaluator's options from settings with these changes (field names of
    :class:`~evalfleet.core.settings.Settings`), as a worker builds them."""
    return EvaluatorOptions.from_settings(Settings(**settings))



def poison(monkeypatch: Any, step: str, *, sample_id: str, error: Exception) -> None:
    """Make the evaluator's ``parse_verdict`` or ``_judgement`` raise ``error`` for one
    sample only (a bug met by one job), through ``monkeypatch``."""
    real = getattr(evaluation, step)

    def poisoned(first: Any, **kwargs: Any) -> Any:
        sample = kwargs["sample"] if step == "parse_verdict" else first.job.sample
        if sample.id == sample_id:
            raise error
        return real(first, **kwargs)

    monkeypatch.setattr(evaluation, step, poisoned)


def label_like_people(queue: Any, jobs: Sequence[Any], metric: Any) -> int:
    """Label each review item of ``jobs`` (bbh_match samples) as the judge simulator's
    people would (its true verdict), as an import; returns how many were labelled."""
    from datetime import UTC, datetime

    from evalfleet.judgesim import simulated_verdict
    from evalfleet.store.queries.review_queue import LabelValue
    from workers.renderer import render_messages

    by_id = {job.sample.id: job.sample for job in jobs}
    labelled = 0
    for item in queue.iter_items(metric=metric.name):
        if item.sample_id not in by_id:
            continue
        truth = simulated_verdict(render_messages(metric, by_id[item.sample_id]),
                                  response_format={"type": "json_object"})
        queue.label(item_id=item.id, reviewer="ann", labels={
            "correct": LabelValue(truth["is_correct"], float(truth["is_correct"])),
            "reasoning": LabelValue(truth["reasoning_score"],
                                    (truth["reasoning_score"] - 1) / 4)},
            comment=None, source="import", now=datetime.now(UTC), require_lease=False)
        labelled += 1
    return labelled
