"""Queue readings from a real Redis broker: waiting jobs, in-flight jobs, the oldest job."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from kombu import Connection, Queue

from evalfleet.broker.probe import RedisQueueProbe, open_queue_probe
from evalfleet.broker.probe import redis as redis_probe
from evalfleet.core.message import Job
from evalfleet.core.sample import parse_sample
from evalfleet.core.settings import Settings
from producers.enqueuer import Enqueuer

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)


@pytest.fixture
def broker_settings(redis_url: str, tmp_path: Path) -> Settings:
    return Settings(broker_url=redis_url, data_dir=tmp_path, batch_size=4)


@pytest.fixture
def probe(redis_url: str) -> Iterator[RedisQueueProbe]:
    found = RedisQueueProbe.from_url(redis_url)
    yield found
    found.close()


def jobs(count: int, *, metric: str = "rag_qa", start: datetime = T0) -> list[Job]:
    return [Job(metric=metric, sample=parse_sample({"id": f"{metric}-{n}"}),
                enqueued_at=start + timedelta(seconds=n)) for n in range(count)]


def publish(settings: Settings, batch: list[Job], **options: object) -> None:
    enqueuer = Enqueuer(settings)
    enqueuer.send_many(batch, **options)  # type: ignore[arg-type]
    enqueuer.close()


def test_waiting_jobs_and_the_oldest(broker_settings: Settings, probe: RedisQueueProbe) -> None:
    publish(broker_settings, jobs(10) + jobs(3, metric="bbh_match", start=T0 + timedelta(1)))
    found = probe.read(["eval.rag_qa", "eval.bbh_match", "eval.context_precision"])
    rag = found["eval.rag_qa"]
    assert (rag.waiting_messages, rag.waiting_jobs, rag.waiting_exact) == (3, 10, True)
    assert rag.oldest_enqueued_at == T0
    assert (rag.in_flight_messages, rag.in_flight_jobs, rag.note) == (0, 0, None)
    assert found["eval.bbh_match"].waiting_jobs == 3
    assert found["eval.bbh_match"].oldest_enqueued_at == T0 + timedelta(days=1)
    empty = found["eval.context_precision"]
    assert (empty.waiting_jobs, empty.oldest_enqueued_at, empty.backlog_jobs) == (0, None, 0)


def test_long_queues_are_sampled_at_both_ends(broker_settings: Settings, probe: RedisQueueProbe,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_probe, "EXACT_COUNT_MESSAGES", 3)
    monkeypatch.setattr(redis_probe, "SAMPLE_MESSAGES", 1)
    publish(broker_settings, jobs(38))  # nine messages of 4 jobs, the newest of 2
    rag = probe.read(["eval.rag_qa"])["eval.rag_qa"]
    assert (rag.waiting_messages, rag.waiting_exact) == (10, False)
    assert rag.waiting_jobs == 30  # 10 messages x (4 + 2) / 2
    assert rag.oldest_enqueued_at == T0


def test_delivered_jobs_are_in_flight(broker_settings: Settings, probe: RedisQueueProbe,
                                      redis_url: str) -> None:
    publish(broker_settings, jobs(6))
    publish(broker_settings, jobs(2, metric="bbh_match"), delays_s={"bbh_match": 600})
    with Connection(redis_url) as connection:
        channel = connection.channel()
        # One message each, held unacknowledged (a worker's late ack).
        first = Queue("eval.rag_qa", channel=channel).get(no_ack=False)  # 4 jobs
        delayed = Queue("eval.bbh_match", channel=channel).get(no_ack=False)
        assert first is not None and delayed is not None
        found = probe.read(["eval.rag_qa", "eval.bbh_match"])
        rag, bbh = found["eval.rag_qa"], found["eval.bbh_match"]
        assert (rag.waiting_jobs, rag.in_flight_messages, rag.in_flight_jobs) == (2, 1, 4)
        assert (rag.scheduled_jobs, rag.backlog_jobs) == (0, 6)
        assert (bbh.waiting_jobs, bbh.in_flight_jobs, bbh.scheduled_jobs) == (0, 2, 2)
        first.ack()
        delayed.ack()
    assert probe.read(["eval.rag_qa"])["eval.rag_qa"].in_flight_jobs == 0


def test_an_unreachable_redis_is_unknown_not_an_error() -> None:
    probe = RedisQueueProbe.from_url("redis://127.0.0.1:1/0", timeout_s=0.5)
    reading = probe.read(["eval.rag_qa"])["eval.rag_qa"]
    assert reading.waiting_jobs is None and reading.backlog_jobs is None
    assert reading.note is not None and "Redis cannot be read" in reading.note
    probe.close()


@pytest.mark.parametrize(("broker_url", "kind", "note"), [
    ("redis://127.0.0.1:6379/0", "RedisQueueProbe", None),
    ("amqp://guest:guest@127.0.0.1:5672//", "AmqpQueueProbe", None),
    (None, "FilesystemQueueProbe", "embedded broker: nothing published in "),
    ("sqs://", "UnknownQueueProbe", "queue depth is not read from sqs:// brokers"),
])
def test_each_broker_gets_its_probe(broker_url: str | None, kind: str, note: str | None,
                                    tmp_path: Path) -> None:
    probe = open_queue_probe(Settings(broker_url=broker_url, data_dir=tmp_path))
    assert type(probe).__name__ == kind
    if note is not None:
        assert (probe.read(["eval.rag_qa"])["eval.rag_qa"].note or "").startswith(note)
    probe.close()
