"""The producer's parts on RabbitMQ: what the fleet shares lives in the shared Redis."""

from __future__ import annotations

from pathlib import Path

from evalfleet.core.budget import budget_day
from evalfleet.core.spend import SpendLedger
from producers.runtime import ProducerRuntime
from producers.traces.buffer import MemoryTraceBuffer, RedisTraceBuffer
from tests.brokers import ready_counts
from tests.producers.builders import producer_settings, record


def fates(runtime: ProducerRuntime, numbers: range) -> list[str]:
    pipeline = runtime.pipeline(metrics=["rag_qa"], rate=1.0, source="test")
    results = pipeline.process([(f"samples[{n}]", record(n)) for n in numbers])
    return [fate.status for result in results for fate in result.jobs]


def test_rabbitmq_producers_share_dedupe_and_budgets_through_the_shared_redis(
    rabbitmq_url: str, redis_url: str, tmp_path: Path,
) -> None:
    settings = producer_settings(rabbitmq_url, tmp_path, shared_redis_url=redis_url,
                                 daily_budgets_usd={"rag_qa": 1.0}, batch_size=4)
    first, second = ProducerRuntime(settings), ProducerRuntime(settings)
    ledger = SpendLedger(redis_url)
    try:
        assert fates(first, range(8)) == ["enqueued"] * 8
        # Another producer sees the same samples inside the window: nothing goes twice.
        assert fates(second, range(8)) == ["duplicate"] * 8
        ledger.add({"rag_qa": 1.0}, day=budget_day())  # the day's budget is spent
        assert fates(second, range(8, 16)) == ["shed"] * 8
    finally:
        ledger.close()
        first.close()
        second.close()
    assert ready_counts(rabbitmq_url, ["eval.rag_qa"]) == {"eval.rag_qa": 2}  # 8 jobs by 4


def test_rabbitmq_queue_depth_sheds_past_the_limit(
    rabbitmq_url: str, tmp_path: Path,
) -> None:
    config = tmp_path / "sampling.yaml"
    config.write_text("metrics: {rag_qa: {max_queue_depth: 8}}")
    settings = producer_settings(rabbitmq_url, tmp_path, sampling_config=config, batch_size=4)
    runtime = ProducerRuntime(settings)
    try:
        statuses = fates(runtime, range(20))
    finally:
        runtime.close()
    assert statuses.count("enqueued") == 8 and statuses.count("shed") == 12


def test_traces_are_assembled_in_the_shared_redis_else_in_memory(
    rabbitmq_url: str, redis_url: str, tmp_path: Path,
) -> None:
    shared = ProducerRuntime(producer_settings(rabbitmq_url, tmp_path,
                                               shared_redis_url=redis_url))
    alone = ProducerRuntime(producer_settings(rabbitmq_url, tmp_path))
    try:
        assert isinstance(shared.trace_buffer(), RedisTraceBuffer)
        assert isinstance(shared.trace_buffer(shared=False), MemoryTraceBuffer)
        assert isinstance(alone.trace_buffer(), MemoryTraceBuffer)
    finally:
        shared.close()
        alone.close()
