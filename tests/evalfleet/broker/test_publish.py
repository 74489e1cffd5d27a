"""Publishing from an app that consumes other queues (the beat) to the metric queues,
declared as workers declare them, on every broker."""

from __future__ import annotations

import pytest
from kombu import Connection

from evalfleet.broker.publish import QueuePublisher
from evalfleet.broker.queues import declare_queues, eval_queue, is_amqp
from evalfleet.core.errors import BrokerUnavailable
from evalfleet.core.message import decode_batch, new_job
from evalfleet.core.sample import parse_sample
from evalfleet.core.settings import Settings
from tests.brokers import EVERY_BROKER
from workers.app import create_app
from workers.health.checks import broker_probe


def jobs(count: int) -> list:  # type: ignore[type-arg]
    return [new_job("rag_qa", parse_sample({"id": f"s{n}", "input": "q", "output": "a"}))
            for n in range(count)]


@EVERY_BROKER
def test_a_beat_app_publishes_to_the_queue_the_workers_declare(settings: Settings) -> None:
    """The beat's app knows no metric queue; what it publishes lands in the workers'
    queue, and a worker declaring that queue afterwards (RabbitMQ: a quorum queue with
    its arguments) agrees with what the publisher declared."""
    app = create_app(settings, concurrency=1)
    try:
        publisher = QueuePublisher(app, settings)
        publisher.publish(jobs(2), countdown_s=0.0)
        publisher.publish(jobs(1), countdown_s=1.5)  # delayed: the delay exchanges exist
        publisher.publish([], countdown_s=0.0)  # nothing to send
        assert broker_probe(settings).depths(["eval.rag_qa"])["eval.rag_qa"] >= 1
        if is_amqp(settings):  # a classic queue of that name would refuse this declare
            with Connection(settings.resolved_broker_url()) as connection:
                declare_queues(connection, [eval_queue(settings, "eval.rag_qa")])
        with app.connection_for_read() as connection:
            message = connection.SimpleQueue(eval_queue(settings, "eval.rag_qa")).get(
                timeout=10)
            body, _, _ = message.decode()
            message.ack()
        args = body[0]  # Celery's message body: (args, kwargs, embed)
        payload = args[0] if isinstance(args, list) else args
        assert [job.sample.id for job in decode_batch(payload)] == ["s0", "s1"]
    finally:
        app.close()


@pytest.mark.parametrize("url", ["redis://127.0.0.1:1/0", "amqp://guest:guest@127.0.0.1:1//"])
def test_an_unreachable_broker_is_a_named_error(settings: Settings, url: str) -> None:
    unreachable = settings.model_copy(update={"broker_url": url})
    app = create_app(unreachable, concurrency=1)
    app.conf.broker_connection_max_retries = 0
    app.conf.broker_transport_options = {**app.conf.broker_transport_options,
                                         "max_retries": 0, "socket_connect_timeout": 1,
                                         "connect_timeout": 1}
    try:
        with pytest.raises(BrokerUnavailable, match="cannot publish"):
            QueuePublisher(app, unreachable).publish(jobs(1), countdown_s=0.0)
    finally:
        app.close()
