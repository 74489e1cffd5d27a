"""Queue depth on the real RabbitMQ: ready messages, by a passive declare."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from evalfleet.broker.depth import AmqpQueueDepth
from evalfleet.core.message import Job
from evalfleet.core.sample import parse_sample
from evalfleet.core.settings import Settings
from producers.enqueuer import Enqueuer


def test_counts_ready_messages(rabbitmq_url: str, tmp_path: Path) -> None:
    settings = Settings(broker_url=rabbitmq_url, data_dir=tmp_path, batch_size=4)
    enqueuer = Enqueuer(settings)
    enqueuer.send_many([Job(metric="rag_qa", sample=parse_sample({"id": f"s{n}"}),
                            enqueued_at=datetime.now(UTC)) for n in range(10)])
    enqueuer.close()
    probe = AmqpQueueDepth(rabbitmq_url)
    try:
        assert probe.depth("eval.rag_qa") == 3  # messages of 4, 4 and 2 jobs
        assert probe.depth("eval.never_declared") == 0
        assert probe.depth("eval.rag_qa") == 3  # the same connection, still usable
    finally:
        probe.close()


def test_unreachable_is_unknown() -> None:
    probe = AmqpQueueDepth("amqp://guest:guest@127.0.0.1:1//", timeout_s=0.5)
    assert probe.depth("eval.rag_qa") is None
    probe.close()
