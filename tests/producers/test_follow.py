"""Following a log into real Redis: no loss and no repeat across rotation, restarts,
broker outages and a killed producer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from evalfleet.core.errors import InvalidSample
from evalfleet.core.settings import Settings
from producers.follow import follow
from producers.offsets import OffsetStore
from producers.pipeline import ProduceStats
from producers.runtime import ProducerRuntime
from producers.tail import Tail
from tests.helpers import wait_until
from tests.producers.builders import producer_settings, queued_ids, record


def write(path: Path, numbers: range) -> None:
    with path.open("a") as stream:
        for n in numbers:
            stream.write(json.dumps(record(n)) + "\n")


def ids(numbers: range) -> list[str]:
    return [f"req-{n:05d}" for n in numbers]


@contextmanager
def following(settings: Settings, path: Path, offsets: Path) -> Iterator[ProduceStats]:
    """Run ``follow`` in a thread until the block ends, like one producer process."""
    runtime = ProducerRuntime(settings)
    store = OffsetStore(offsets)
    tail = Tail(path, start=store.load(), rotation_grace_s=0.2)
    stop, result = threading.Event(), ProduceStats()
    errors: list[InvalidSample] = []

    def run() -> None:
        stats = follow(tail, pipeline=runtime.pipeline(metrics=["rag_qa"], rate=1.0,
                                                       source="follow"),
                       offsets=store, batch_size=7, stop=stop, on_error=errors.append,
                       poll_interval_s=0.02)
        result.__dict__.update(stats.__dict__)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        yield result
    finally:
        stop.set()
        thread.join(timeout=30)
        tail.close()
        runtime.close()
    assert not errors


def test_rotation_and_restarts_lose_and_repeat_nothing(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path,
) -> None:
    # No deduplication: the offsets alone must prevent repeats.
    settings = producer_settings(redis_url, tmp_path, dedupe_window_s=0)
    log, offsets = tmp_path / "app.log", tmp_path / "app.offset.json"
    write(log, range(0, 50))
    with following(settings, log, offsets):
        wait_until(lambda: len(queued_ids(redis_client, "rag_qa")) == 50, timeout_s=20,
                   what="the first 50 lines")
        write(log, range(50, 60))
        os.rename(log, tmp_path / "app.log.1")  # rotation while following
        write(tmp_path / "app.log.1", range(60, 65))  # the writer's last lines
        write(log, range(65, 80))
        wait_until(lambda: len(queued_ids(redis_client, "rag_qa")) == 80, timeout_s=20,
                   what="80 lines across the rotation")
    write(log, range(80, 90))
    os.rename(log, tmp_path / "app.log.2")  # rotation while stopped
    write(log, range(90, 100))
    with following(settings, log, offsets) as stats:
        wait_until(lambda: len(queued_ids(redis_client, "rag_qa")) == 100, timeout_s=20,
                   what="100 lines after the restart")
    assert queued_ids(redis_client, "rag_qa") == ids(range(100))
    assert stats.jobs == 20


def test_a_broker_outage_holds_the_position(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path,
) -> None:
    log, offsets = tmp_path / "app.log", tmp_path / "app.offset.json"
    write(log, range(0, 30))
    down = producer_settings("redis://127.0.0.1:1/0", tmp_path)
    with following(down, log, offsets) as stats:
        threading.Event().wait(1.5)  # a few attempts while the broker is down
    assert stats.jobs == 0 and OffsetStore(offsets).load() is None
    with following(producer_settings(redis_url, tmp_path), log, offsets):
        wait_until(lambda: len(queued_ids(redis_client, "rag_qa")) == 30, timeout_s=20,
                   what="the lines held back")
    assert queued_ids(redis_client, "rag_qa") == ids(range(30))


def test_a_killed_producer_loses_nothing(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path,
) -> None:
    settings = producer_settings(redis_url, tmp_path)
    log = tmp_path / "app.log"
    write(log, range(0, 400))
    env = {**os.environ, **settings.as_environment()}
    command = [sys.executable, "-m", "evalfleet", "produce", str(log), "--follow",
               "--metric", "rag_qa", "--batch-size", "20"]
    first = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, start_new_session=True)
    wait_until(lambda: len(queued_ids(redis_client, "rag_qa")) >= 100, timeout_s=30,
               what="a first part")
    os.killpg(first.pid, signal.SIGKILL)  # no clean stop
    first.communicate()
    write(log, range(400, 450))
    second = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, start_new_session=True)
    wait_until(lambda: set(queued_ids(redis_client, "rag_qa")) >= set(ids(range(450))),
               timeout_s=30, what="every line")
    os.killpg(second.pid, signal.SIGTERM)
    _, stderr = second.communicate(timeout=30)
    assert second.returncode == 0, stderr.decode()
    assert b"following from line" in stderr
    # A batch published but not yet marked and saved when the producer died is read
    # again: at most that one batch repeats (and the workers judge it once).
    queued = queued_ids(redis_client, "rag_qa")
    assert len(queued) - 450 <= 20
