"""What the chaos runs found in ``workers/app.py``: crashed work returns soon after the
visibility timeout, and nothing waits in a worker past it (a message held that long is
handed out a second time under the same id, so both copies judge the same jobs): jobs
that cannot go on now go straight back to the queue and the worker pauses it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery, Task

from evalfleet.core.message import EVALUATE_TASK, encode_batch, encode_job, new_job
from evalfleet.core.sample import parse_sample
from evalfleet.core.settings import Settings
from tests.helpers import DeferringJudge, queued
from workers.app import celery_config, create_app, run_message
from workers.evaluation import STORE_PAUSE_S
from workers.runtime import Runtime, build_runtime

SAMPLE = {"id": "chaos-1", "input": "q", "output": "a"}


@pytest.fixture
def task(settings: Settings) -> Iterator[Task]:
    app: Celery = create_app(settings, concurrency=4)
    evaluate = app.tasks[EVALUATE_TASK]
    evaluate.push_request(id="message-1")
    yield evaluate
    evaluate.pop_request()
    app.close()


def test_redis_workers_look_for_expired_jobs_on_every_sweep(
    settings: Settings, tmp_path: Path,
) -> None:
    # kombu 5.7 looked on every tenth 10 s sweep: a killed worker's jobs came back up
    # to 100 s after the visibility timeout.
    options = celery_config(settings, concurrency=8)["broker_transport_options"]
    assert options["unacked_restore_throttle"] == 1
    embedded = celery_config(Settings(data_dir=tmp_path), concurrency=8)
    assert "unacked_restore_throttle" not in embedded["broker_transport_options"]


def paused_for_s(runtime: Runtime) -> float:
    return runtime.paused_until["eval.rag_qa"] - time.monotonic()


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
    assert run_message(task, message, runtime) == "1 requeued"
    ((_job, headers),) = queued(redis.Redis.from_url(redis_url), "rag_qa")
    # Due now, under the same id: the claims this delivery took stay its own.
    assert headers["eta"] is None and headers["id"] == "message-1"
    assert 0 < paused_for_s(runtime) <= min(STORE_PAUSE_S, settings.judge.retry_max_s)


def test_a_deferred_batch_goes_back_at_once_and_pauses_the_queue(
    settings: Settings, task: Task, redis_url: str, database_url: str,
) -> None:
    runtime = build_runtime(settings, concurrency=1)
    runtime.evaluator.judge = DeferringJudge(wait_s=120.0)  # the breaker's longest pause
    jobs = [new_job("rag_qa", parse_sample({**SAMPLE, "id": f"chaos-{n}"})) for n in range(3)]
    assert run_message(task, encode_batch(jobs), runtime) == "3 paused"
    client = redis.Redis.from_url(redis_url)
    assert client.llen("eval.rag_qa") == 1  # one message for the batch, not one per job
    waiting = queued(client, "rag_qa")
    assert [job["sample"]["id"] for job, _ in waiting] == ["chaos-0", "chaos-1", "chaos-2"]
    assert all(headers["eta"] is None for _, headers in waiting)  # due now
    assert 0 < paused_for_s(runtime) <= settings.judge.retry_max_s
