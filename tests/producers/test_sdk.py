"""The SDK: submit never raises or blocks, publishes in the background, counts drops."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from evalfleet import sdk
from evalfleet.core.settings import Settings
from evalfleet.sdk import Submitter
from producers.runtime import ProducerRuntime
from tests.helpers import wait_until
from tests.producers.builders import producer_settings, queued_ids, record, sample
from tests.producers.conftest import OwnRedis


def timed_submits(submitter: Submitter, items: list[Any]) -> tuple[list[str], float]:
    outcomes, slowest_s = [], 0.0
    for item in items:
        started = time.perf_counter()
        outcomes.append(submitter.submit(item))
        slowest_s = max(slowest_s, time.perf_counter() - started)
    return outcomes, slowest_s


def test_publishes_in_the_background(psettings: Settings, redis_client: redis.Redis) -> None:
    submitter = Submitter(psettings, metrics=["rag_qa"])
    outcomes = [submitter.submit(record(n, input=f"mail u{n}@x.io")) for n in range(30)]
    outcomes.append(submitter.submit(sample(30)))  # a Sample works too
    assert set(outcomes) == {"queued"}
    assert submitter.flush(timeout_s=10)
    stats = submitter.stats()
    submitter.close()
    assert stats.enqueued == {"rag_qa": 31} and stats.accepted == 31
    assert stats.dropped_total == 0 and stats.buffered == 0
    assert sorted(queued_ids(redis_client, "rag_qa")) == [f"req-{n:05d}" for n in range(31)]
    assert redis_client.lindex("eval.rag_qa", -1) is not None


def test_never_raises_or_blocks_while_redis_is_down_and_counts_the_drops(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    settings = producer_settings("redis://127.0.0.1:1/0", tmp_path)
    submitter = Submitter(settings, metrics=["rag_qa", "context_precision"], max_wait_s=0.5)
    junk: list[Any] = [None, 42, "text", {"id": ""}, {"id": "x", "context": [1]}]
    with caplog.at_level(logging.WARNING):
        outcomes, slowest_s = timed_submits(submitter, [record(n) for n in range(40)] + junk)
        wait_until(lambda: submitter.stats().dropped_total >= 80, timeout_s=20,
                   what="the drops to be counted")
    stats = submitter.stats()
    submitter.close(timeout_s=0.5)
    assert outcomes.count("queued") == 42 and outcomes.count("rejected") == 3
    assert slowest_s < 0.05
    assert stats.dropped == {("rag_qa", "broker_unavailable"): 40,
                             ("context_precision", "broker_unavailable"): 40}
    assert stats.rejected == 5 and stats.enqueued == {}
    assert "field 'context[0]'" in caplog.text and "id 'x'" in caplog.text


def test_redis_stopped_then_back_within_the_wait_loses_nothing(
    own_redis: OwnRedis, tmp_path: Path,
) -> None:
    submitter = Submitter(producer_settings(own_redis.url, tmp_path), metrics=["rag_qa"],
                          max_wait_s=30)
    for n in range(10):
        submitter.submit(record(n))
    assert submitter.flush(timeout_s=10)
    own_redis.stop()
    outcomes, slowest_s = timed_submits(submitter, [record(n) for n in range(10, 30)])
    assert set(outcomes) == {"queued"} and slowest_s < 0.05
    time.sleep(0.5)
    assert submitter.stats().enqueued == {"rag_qa": 10}
    own_redis.start()  # the same port, empty: only the jobs buffered meanwhile arrive
    assert submitter.flush(timeout_s=20)
    stats = submitter.stats()
    submitter.close()
    assert stats.enqueued == {"rag_qa": 30} and stats.dropped_total == 0
    client = redis.Redis.from_url(own_redis.url)
    assert sorted(queued_ids(client, "rag_qa")) == [f"req-{n:05d}" for n in range(10, 30)]


def test_redis_stopped_for_too_long_drops_and_counts(own_redis: OwnRedis,
                                                     tmp_path: Path) -> None:
    submitter = Submitter(producer_settings(own_redis.url, tmp_path), metrics=["rag_qa"],
                          max_wait_s=0.5)
    submitter.submit(record(0))
    assert submitter.flush(timeout_s=10)
    own_redis.stop()
    for n in range(1, 21):
        assert submitter.submit(record(n)) == "queued"
    wait_until(lambda: submitter.stats().dropped_total == 20, timeout_s=20, what="20 drops")
    stats = submitter.stats()
    submitter.close(timeout_s=0.5)
    assert stats.dropped == {("rag_qa", "broker_unavailable"): 20}
    assert stats.enqueued == {"rag_qa": 1}


def blocked_factory(settings: Settings, gate: threading.Event) -> Callable[[], ProducerRuntime]:
    def build() -> ProducerRuntime:
        gate.wait(10)
        return ProducerRuntime(settings)

    return build


def test_a_full_buffer_drops_new_samples_and_counts_them(
    psettings: Settings, redis_client: redis.Redis,
) -> None:
    gate = threading.Event()
    submitter = Submitter(psettings, metrics=["rag_qa"], buffer_size=10,
                          runtime_factory=blocked_factory(psettings, gate))
    submitter.submit(record(0))
    wait_until(lambda: submitter.stats().buffered == 0, timeout_s=5,
               what="the thread to take the first sample")
    outcomes = [submitter.submit(record(n)) for n in range(1, 31)]
    assert outcomes.count("queued") == 10 and outcomes.count("dropped") == 20
    assert submitter.stats().dropped == {("rag_qa", "buffer_full"): 20}
    gate.set()
    assert submitter.flush(timeout_s=10)
    assert submitter.stats().enqueued == {"rag_qa": 11}
    submitter.close()
    assert len(queued_ids(redis_client, "rag_qa")) == 11


def test_close_counts_what_is_left(psettings: Settings) -> None:
    gate = threading.Event()
    submitter = Submitter(psettings, metrics=["rag_qa"],
                          runtime_factory=blocked_factory(psettings, gate))
    submitter.submit(record(0))
    wait_until(lambda: submitter.stats().buffered == 0, timeout_s=5,
               what="the thread to take the first sample")
    for n in range(1, 5):
        submitter.submit(record(n))
    submitter.close(timeout_s=0.2)
    assert submitter.stats().dropped == {("rag_qa", "shutdown"): 4}
    assert submitter.submit(record(9)) == "dropped"
    gate.set()  # the sample in flight still ends somewhere, and is counted
    wait_until(lambda: submitter.stats().enqueued == {"rag_qa": 1}, timeout_s=10,
               what="the sample in flight")


def test_a_configuration_that_cannot_load_is_logged_and_counted(
    psettings: Settings, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("metrics: {nope: {}}")
    submitter = Submitter(psettings, metrics=["rag_qa"], sampling_config=bad)
    with caplog.at_level(logging.ERROR):
        assert submitter.submit(record(1)) == "queued"
        assert submitter.flush(timeout_s=10)
    assert submitter.stats().dropped == {("rag_qa", "internal_error"): 1}
    assert "unknown metric 'nope'" in caplog.text
    submitter.close()


def test_module_level_api_under_evalfleet_sdk(redis_url: str, redis_client: redis.Redis,
                                              tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "sampling.yaml"
    config.write_text("metrics: {rag_qa: {rate: 1.0}, context_precision: {rate: 0.0}}")
    monkeypatch.setenv("EVALFLEET_BROKER_URL", redis_url)
    monkeypatch.setenv("EVALFLEET_SAMPLING_CONFIG", str(config))
    sdk.shutdown()
    try:
        for n in range(5):
            assert sdk.submit(record(n)) == "queued"  # settings from the environment
        assert sdk.flush(timeout_s=10)
        assert sdk.stats().enqueued == {"rag_qa": 5}
        assert sdk.stats().sampled_out == 0
        sdk.configure(producer_settings(redis_url, tmp_path), metrics=["bbh_match"])
        assert sdk.submit(record(7)) == "queued"
        assert sdk.flush(timeout_s=10)
        assert sdk.stats().enqueued == {"bbh_match": 1}
    finally:
        sdk.shutdown()
    assert len(queued_ids(redis_client, "rag_qa")) == 5
    assert len(queued_ids(redis_client, "bbh_match")) == 1
