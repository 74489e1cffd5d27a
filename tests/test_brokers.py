"""Broker choice by URL and the queue declarations producers and workers share
(evalfleet/broker/queues.py), against real Redis and RabbitMQ."""

from __future__ import annotations

import time

import amqp
import pytest
from kombu import Connection, Queue

from evalfleet.broker.queues import (
    DEAD_LETTER_QUEUE,
    broker_countdown_s,
    broker_transport_options,
    eval_queue,
    is_amqp,
    is_redis,
)
from evalfleet.core.message import new_job
from evalfleet.core.sample import parse_sample
from evalfleet.core.settings import Settings
from producers.enqueuer import Enqueuer
from tests.brokers import ready_counts
from tests.helpers import wait_until

JOB = new_job("rag_qa", parse_sample({"id": "b-1", "input": "q", "output": "a"}))


@pytest.mark.parametrize(("url", "redis", "rabbitmq"), [
    ("redis://127.0.0.1:6379/0", True, False),
    ("rediss://cache.example.com:6380/0", True, False),
    ("amqp://guest:guest@127.0.0.1:5672//", False, True),
    ("amqps://user:pw@mq.example.com:5671/evalfleet", False, True),
    ("pyamqp://guest@127.0.0.1//", False, True),
    (None, False, False),  # the embedded file-system broker
])
def test_the_broker_is_chosen_by_url(url: str | None, redis: bool, rabbitmq: bool) -> None:
    settings = Settings(broker_url=url)
    assert (is_redis(settings), is_amqp(settings)) == (redis, rabbitmq)


@pytest.mark.parametrize(("countdown_s", "url", "expected"), [
    (0.0, "redis://h/0", None),
    (0.3, "redis://h/0", 0.3),
    (0.3, "amqp://h//", 1.0),  # RabbitMQ delays whole seconds, and at least one
    (2.5, "amqp://h//", 3.0),
    (4.0, "amqp://h//", 4.0),
    (-1.0, "amqp://h//", None),
])
def test_countdowns_fit_the_broker(countdown_s: float, url: str, expected: float | None) -> None:
    assert broker_countdown_s(countdown_s, broker_url=url) == expected


def test_redis_queues_are_what_celery_makes_by_itself() -> None:
    queue = eval_queue(Settings(broker_url="redis://127.0.0.1:6379/0"), "eval.rag_qa")
    assert (queue.name, queue.routing_key, queue.exchange.name, queue.exchange.type) == (
        "eval.rag_qa", "eval.rag_qa", "eval.rag_qa", "direct")
    assert not queue.queue_arguments


def test_rabbitmq_queues_are_quorum_queues_with_a_dead_letter_exchange() -> None:
    settings = Settings(broker_url="amqp://guest:guest@127.0.0.1:5672//")
    queue = eval_queue(settings, "eval.rag_qa")
    assert queue.durable and queue.exchange.type == "topic"
    assert queue.queue_arguments["x-queue-type"] == "quorum"
    assert queue.queue_arguments["x-dead-letter-exchange"] == "eval.dead"
    assert broker_transport_options(settings, concurrency=1) == {"confirm_publish": True}


def test_rabbitmq_publishes_wait_for_confirms(rabbitmq_url: str) -> None:
    settings = Settings(broker_url=rabbitmq_url)
    with Connection(rabbitmq_url, transport_options=broker_transport_options(
            settings, concurrency=1)) as connection:
        connection.connect()
        assert connection.connection.confirm_publish


def test_a_producer_declares_the_queue_as_workers_do(rabbitmq_url: str) -> None:
    settings = Settings(broker_url=rabbitmq_url)
    enqueuer = Enqueuer(settings)
    enqueuer.send(JOB)
    enqueuer.close()
    assert ready_counts(rabbitmq_url, ["eval.rag_qa"]) == {"eval.rag_qa": 1}
    with Connection(rabbitmq_url) as connection:
        # The workers' declaration is accepted; a plain (classic) one is not: it is
        # a quorum queue, with these arguments.
        eval_queue(settings, "eval.rag_qa").bind(connection.channel()).declare()
        with pytest.raises(amqp.exceptions.PreconditionFailed):
            Queue("eval.rag_qa").bind(connection.channel()).declare()


def test_a_rejected_message_is_dead_lettered(rabbitmq_url: str) -> None:
    settings = Settings(broker_url=rabbitmq_url)
    enqueuer = Enqueuer(settings)
    enqueuer.send(JOB)
    enqueuer.close()
    with Connection(rabbitmq_url) as connection:
        queue = eval_queue(settings, "eval.rag_qa").bind(connection.channel())
        message = queue.get(no_ack=False)
        assert message is not None
        message.reject(requeue=False)
    wait_until(lambda: ready_counts(rabbitmq_url, [DEAD_LETTER_QUEUE]) == {
        DEAD_LETTER_QUEUE: 1}, timeout_s=10, what="the dead letter")
    assert ready_counts(rabbitmq_url, ["eval.rag_qa"]) == {"eval.rag_qa": 0}


def test_a_delayed_job_waits_in_rabbitmq_before_any_worker_ran(rabbitmq_url: str) -> None:
    settings = Settings(broker_url=rabbitmq_url)
    enqueuer = Enqueuer(settings)
    sent = time.monotonic()
    enqueuer.send(JOB, delay_s=1.5)  # rounded up to 2 s
    enqueuer.close()
    assert ready_counts(rabbitmq_url, ["eval.rag_qa"]) == {"eval.rag_qa": 0}
    wait_until(lambda: ready_counts(rabbitmq_url, ["eval.rag_qa"]) == {"eval.rag_qa": 1},
               timeout_s=15, what="the delayed job", interval_s=0.1)
    assert time.monotonic() - sent >= 1.9
