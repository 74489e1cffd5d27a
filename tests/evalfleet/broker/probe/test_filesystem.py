"""Queue readings from the embedded file-system broker: message files published for real."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from evalfleet.broker.probe import FilesystemQueueProbe, QueueReading, open_queue_probe
from evalfleet.broker.probe import filesystem as filesystem_probe
from evalfleet.broker.queues import embedded_broker_folder
from evalfleet.core.message import Job
from evalfleet.core.sample import parse_sample
from evalfleet.core.settings import Settings
from producers.enqueuer import Enqueuer
from tests.helpers import wait_until

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)


def publish(settings: Settings, count: int, *, metric: str = "rag_qa") -> None:
    enqueuer = Enqueuer(settings)
    try:
        enqueuer.send_many([Job(metric=metric, sample=parse_sample({"id": f"{metric}-{n}"}),
                                enqueued_at=T0 + timedelta(seconds=n)) for n in range(count)])
    finally:
        enqueuer.close()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "data", batch_size=3)


def read(settings: Settings, queue: str = "eval.rag_qa") -> QueueReading:
    probe = open_queue_probe(settings)
    assert isinstance(probe, FilesystemQueueProbe)
    try:
        return probe.read([queue])[queue]
    finally:
        probe.close()


def test_counts_messages_and_jobs_per_queue(settings: Settings) -> None:
    publish(settings, 7)
    publish(settings, 2, metric="bbh_match")
    reading = read(settings)
    assert (reading.waiting_messages, reading.waiting_jobs, reading.waiting_exact) == (3, 7, True)
    assert reading.oldest_enqueued_at == T0
    assert reading.in_flight_jobs is None and reading.note == filesystem_probe.FILESYSTEM_NOTE
    assert read(settings, "eval.bbh_match").waiting_jobs == 2


def test_nothing_published_yet_is_an_empty_queue(settings: Settings) -> None:
    reading = read(settings)
    assert (reading.waiting_messages, reading.waiting_jobs) == (0, 0)
    assert reading.note is not None and reading.note.startswith(
        "embedded broker: nothing published in ")


def test_an_unreadable_file_counts_as_one_job(settings: Settings) -> None:
    publish(settings, 4)
    folder = embedded_broker_folder(settings) / "queue"
    (folder / "9999999999_x.eval.rag_qa.msg").write_bytes(b"\xff not json")
    reading = read(settings)
    assert (reading.waiting_messages, reading.waiting_jobs) == (3, 5)


def test_a_long_queue_is_sampled_at_both_ends(settings: Settings,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(filesystem_probe, "EXACT_COUNT_MESSAGES", 2)
    monkeypatch.setattr(filesystem_probe, "SAMPLE_MESSAGES", 1)
    publish(settings, 9)  # three messages of 3 jobs
    # kombu names a file by the millisecond of its monotonic clock; the last message must
    # sort last, so it is published once that clock has moved on.
    published = time.monotonic()
    wait_until(lambda: time.monotonic() - published > 0.002, timeout_s=5,
               what="kombu's millisecond clock to move on", interval_s=0.001)
    publish(settings, 1)  # the ends hold 3 and 1
    reading = read(settings)
    assert (reading.waiting_messages, reading.waiting_jobs, reading.waiting_exact) == (
        4, 8, False)
