"""The Celery edge: broker settings that keep jobs safe, and no job acknowledged into nowhere."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import redis
from celery import Celery, Task

from evalfleet.core.errors import BrokerUnavailable, JudgeError
from evalfleet.core.message import EVALUATE_TASK, encode_job, new_job
from evalfleet.core.sample import parse_sample
from evalfleet.core.settings import Settings
from evalfleet.store import SqlStore
from workers.app import REDIS_TRANSPORT, celery_config, create_app, run_message
from workers.judge import JudgeClient, JudgeReply, JudgeRequest
from workers.runtime import Runtime, build_runtime
from workers.shutdown import ShutdownDeadline

SAMPLE = {"id": "req-1", "input": "q", "output": "a"}


def test_redis_settings_keep_jobs_across_crashes(settings: Settings) -> None:
    config = celery_config(settings, concurrency=256)
    assert config["task_acks_late"] and config["task_reject_on_worker_lost"]
    assert config["worker_prefetch_multiplier"] == 1 and config["worker_disable_prefetch"]
    assert config["worker_cancel_long_running_tasks_on_connection_loss"]
    assert config["result_backend"] is None and config["task_ignore_result"]
    assert config["accept_content"] == ["json"] and config["task_serializer"] == "json"
    options = config["broker_transport_options"]
    assert options["visibility_timeout"] > settings.judge.retry_max_s
    # Late acks from many threads at once exhaust a pool sized for the default
    # of 10 connections ("Too many connections", duplicate runs).
    assert options["max_connections"] >= 256 + 32
    # Pop and record as unacknowledged in one step, unless turned off.
    assert config["broker_transport"] == REDIS_TRANSPORT
    kombu_consume = settings.model_copy(update={"redis_atomic_consume": False})
    assert celery_config(kombu_consume, concurrency=4)["broker_transport"] is None


def test_rabbitmq_settings_use_quorum_queues_and_confirms(settings: Settings) -> None:
    rabbitmq = settings.model_copy(update={"broker_url": "amqp://guest:guest@127.0.0.1:5672//"})
    config = celery_config(rabbitmq, concurrency=256, queues=["eval.rag_qa"])
    assert config["task_acks_late"] and config["task_reject_on_worker_lost"]
    (queue,) = config["task_queues"]
    assert queue.name == "eval.rag_qa" and queue.queue_arguments["x-queue-type"] == "quorum"
    # Quorum queues take no global QoS; the visibility timeout is a Redis notion.
    assert not config["worker_disable_prefetch"]
    assert config["broker_transport_options"] == {"confirm_publish": True}


def test_embedded_broker_needs_no_server(tmp_path: Path) -> None:
    config = celery_config(Settings(data_dir=tmp_path), concurrency=4)
    assert not config["worker_disable_prefetch"]
    assert Path(config["broker_transport_options"]["data_folder_in"]).is_dir()


@pytest.fixture
def task(settings: Settings) -> Iterator[tuple[Celery, Task]]:
    app = create_app(settings, concurrency=4)
    evaluate = app.tasks[EVALUATE_TASK]
    evaluate.push_request(id="message-1")
    yield app, evaluate
    evaluate.pop_request()
    app.close()


def queued(redis_url: str, queue: str = "eval.rag_qa") -> list[dict[str, object]]:
    return [json.loads(raw) for raw in redis.Redis.from_url(redis_url).lrange(queue, 0, -1)]


def test_a_job_still_waiting_for_the_judge_at_the_shutdown_deadline_goes_back(
    settings: Settings, task: tuple[Celery, Task], redis_url: str, store: SqlStore,
) -> None:
    deadline = ShutdownDeadline()
    deadline.expire()
    runtime = build_runtime(settings, concurrency=1, deadline=deadline)
    message = encode_job(new_job("rag_qa", parse_sample(SAMPLE)))
    assert run_message(task[1], message, runtime) == "1 requeued"
    (republished,) = queued(redis_url)
    headers = republished["headers"]
    assert isinstance(headers, dict)
    # The same message id, so it takes over the claim this delivery holds; due at once.
    assert headers["id"] == "message-1" and headers["eta"] is None
    assert store.counts().verdicts == 0 and store.counts().dead_letters == 0


class _SharedRedisAway(JudgeClient):
    """A judge call that fails with a passing error no branch of the worker names."""

    def complete_many(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply | JudgeError]:
        raise BrokerUnavailable("the shared Redis is unavailable")


def test_a_failure_that_may_pass_sends_the_jobs_back_not_to_the_dead_letters(
    settings: Settings, task: tuple[Celery, Task], redis_url: str, store: SqlStore,
) -> None:
    runtime = build_runtime(settings, concurrency=1)
    runtime.evaluator.judge = _SharedRedisAway()
    message = encode_job(new_job("rag_qa", parse_sample(SAMPLE)))
    assert run_message(task[1], message, runtime) == "1 requeued"
    (republished,) = queued(redis_url)
    headers = republished["headers"]
    assert isinstance(headers, dict) and headers["id"] == "message-1"
    assert headers["eta"] is not None  # after the first retry delay, not at once
    assert store.counts().dead_letters == 0


def test_an_undecodable_message_becomes_a_dead_letter(
    settings: Settings, task: tuple[Celery, Task], store: SqlStore,
) -> None:
    runtime = build_runtime(settings, concurrency=1)
    assert run_message(task[1], {"v": 1, "metric": "rag_qa"}, runtime) == "dead_letter"
    (letter,) = store.iter_dead_letters()
    assert letter.error_class == "invalid_message" and letter.metric == "rag_qa"
    assert letter.payload == {"v": 1, "metric": "rag_qa"}


BROKEN_METRIC = """
name: broken
variables:
  answer: {from: output}
messages:
  - role: user
    syntax: jinja
    template: "{{ answer.__class__.__mro__ }}"
output:
  format: json
  fields:
    score: {type: number, minimum: 0, maximum: 1}
scores:
  score: {from: score}
"""


def test_an_unexpected_error_keeps_the_job_as_a_dead_letter(
    settings: Settings, task: tuple[Celery, Task], store: SqlStore, tmp_path: Path,
) -> None:
    (tmp_path / "broken.yaml").write_text(BROKEN_METRIC)
    runtime: Runtime = build_runtime(settings.model_copy(update={"metrics_dir": tmp_path}),
                                     concurrency=1)
    message = encode_job(new_job("broken", parse_sample(SAMPLE)))
    assert run_message(task[1], message, runtime) == "1 dead_letter"
    (letter,) = store.iter_dead_letters()
    assert letter.error_class == "internal_error"
    assert letter.payload == message
    assert [(entry["attempt"], entry["error_class"]) for entry in letter.history] == [
        (1, "internal_error")]


def test_a_worker_process_does_not_load_the_statistics_libraries() -> None:
    """scipy and numpy (calibration, alert statistics) cost a worker ~70 MB of memory."""
    probe = ("import sys, workers.app, workers.runtime, workers.evaluation; "
             "print(sorted(m for m in ('scipy', 'numpy') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=120, check=True)
    assert result.stdout.strip() == "[]"
