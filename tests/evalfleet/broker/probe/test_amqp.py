"""Queue readings from the real RabbitMQ on 127.0.0.1:5672 (ready messages only)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kombu import Connection

from evalfleet.broker.probe import AmqpQueueProbe
from evalfleet.broker.probe.amqp import AMQP_NOTE
from evalfleet.core.message import Job
from evalfleet.core.sample import parse_sample
from evalfleet.core.settings import Settings
from producers.enqueuer import Enqueuer

AMQP_URL = "amqp://guest:guest@127.0.0.1:5672//"


@pytest.fixture
def metric() -> Iterator[str]:
    """A metric name of this test's own; its queue is deleted afterwards."""
    name = f"ops_probe_{uuid.uuid4().hex[:8]}"
    yield name
    with Connection(AMQP_URL) as connection:
        connection.default_channel.queue_delete(f"eval.{name}")


def test_ready_messages_of_a_queue(metric: str, tmp_path: Path) -> None:
    settings = Settings(broker_url=AMQP_URL, data_dir=tmp_path, batch_size=4)
    enqueuer = Enqueuer(settings)
    enqueuer.send_many([Job(metric=metric, sample=parse_sample({"id": f"s{n}"}),
                            enqueued_at=datetime.now(UTC)) for n in range(10)])
    enqueuer.close()
    found = AmqpQueueProbe(AMQP_URL).read([f"eval.{metric}", f"eval.{metric}_none"])
    reading = found[f"eval.{metric}"]
    assert (reading.waiting_messages, reading.waiting_jobs, reading.in_flight_jobs) == (3, None,
                                                                                         None)
    assert reading.note == AMQP_NOTE and reading.backlog_jobs is None
    assert found[f"eval.{metric}_none"].waiting_messages == 0  # never declared: empty


def test_an_unreachable_rabbitmq_is_unknown() -> None:
    reading = AmqpQueueProbe("amqp://guest:guest@127.0.0.1:1//", timeout_s=0.5).read(
        ["eval.rag_qa"])["eval.rag_qa"]
    assert reading.waiting_messages is None
    assert reading.note is not None and reading.note.startswith("RabbitMQ cannot be read")
