"""What the chaos runs found in ``workers/app.py``: crashed work returns soon after the
visibility timeout, and no countdown outlasts it (a message held past it is handed out a
second time under the same id, so both copies judge the same jobs)."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery, Task

from evalfleet.errors import JudgeDeferred, JudgeError
from evalfleet.message import EVALUATE_TASK, encode_job, new_job
from evalfleet.sample import parse_sample
from evalfleet.settings import Settings
from workers.app import STORE_PAUSE_S, celery_config, create_app, run_message
from workers.judge import JudgeClient, JudgeReply, JudgeRequest
from workers.runtime import build_runtime

SAMPLE = {"id": "chaos-1", "input": "q", "output": "a"}


class DeferringJudge(JudgeClient):
    """Sends nothing: every call is deferred for ``wait_s`` (an open circuit, a spent budget)."""

    def __init__(self, wait_s: float) -> None:
        self.wait_s = wait_s

    def complete_many(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply | JudgeError]:
        return [JudgeDeferred("circuit open", retry_after_s=self.wait_s) for _ in requests]


@pytest.fixture
def task(settings: Settings) -> Iterator[Task]:
    app: Celery = create_app(settings, concurrency=4)
    evaluate = app.tasks[EVALUATE_TASK]
    evaluate.push_request(id="message-1")
    yield evaluate
    evaluate.pop_request()
    app.close()


def republished_in_s(redis_url: str) -> float:
    """Seconds from now until the one message in ``eval.rag_qa`` is due."""
    (raw,) = redis.Redis.from_url(redis_url).lrange("eval.rag_qa", 0, -1)
    envelope: dict[str, Any] = json.loads(raw)
    assert json.loads(base64.b64decode(envelope["body"]))[0]  # the jobs are in it
    eta = datetime.fromisoformat(envelope["headers"]["eta"])
    return (eta - datetime.now(UTC)).total_seconds()


def test_redis_workers_look_for_expired_jobs_on_every_sweep(
    settings: Settings, tmp_path: Path,
) -> None:
    # kombu 5.7 looked on every tenth 10 s sweep: a killed worker's jobs came back up
    # to 100 s after the visibility timeout.
    options = celery_config(settings, concurrency=8)["broker_transport_options"]
    assert options["unacked_restore_throttle"] == 1
    embedded = celery_config(Settings(data_dir=tmp_path), concurrency=8)
    assert "unacked_restore_throttle" not in embedded["broker_transport_options"]


def test_a_database_outage_sends_the_jobs_back_at_once_and_pauses_the_queue(
    settings: Settings, task: Task, redis_url: str,
) -> None:
    # With a countdown, every message of the queue cycled into the workers to wait out
    # its delay there; after a 30 s outage they waited past the visibility timeout and
    # were judged twice.
    unreachable = settings.model_copy(
        update={"database_url": "postgresql+psycopg://postgres@127.0.0.1:1/evalfleet"})
    runtime = build_runtime(unreachable, concurrency=1)
    message = encode_job(new_job("rag_qa", parse_sample(SAMPLE)))
    assert run_message(task, message, runtime) == "retry"
    (raw,) = redis.Redis.from_url(redis_url).lrange("eval.rag_qa", 0, -1)
    envelope = json.loads(raw)
    assert envelope["headers"]["eta"] is None and envelope["headers"]["id"] == "message-1"
    paused_for_s = runtime.paused_until["eval.rag_qa"] - time.monotonic()
    assert 0 < paused_for_s <= min(STORE_PAUSE_S, settings.retry_max_s)


def test_a_deferred_job_waits_no_longer_than_the_longest_backoff(
    settings: Settings, task: Task, redis_url: str, database_url: str,
) -> None:
    runtime = build_runtime(settings, concurrency=1)
    runtime.evaluator.judge = DeferringJudge(wait_s=120.0)  # the breaker's longest pause
    message = encode_job(new_job("rag_qa", parse_sample(SAMPLE)))
    assert run_message(task, message, runtime) == "1 retry"
    assert 0 < republished_in_s(redis_url) <= settings.retry_max_s
