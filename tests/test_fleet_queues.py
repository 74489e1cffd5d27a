"""Workers on several metric queues, on every broker (Redis, RabbitMQ, the embedded one).

A worker consuming several queues must take from whichever has work: waiting on an
empty queue before each message served a busy one a message a second.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from evalfleet.core.message import Job, new_job
from evalfleet.core.sample import parse_sample
from evalfleet.core.settings import Settings
from evalfleet.judgesim import RunningSim
from evalfleet.store import VerdictStore
from producers.enqueuer import Enqueuer
from tests.brokers import BROKERS
from tests.helpers import WorkerProcess, wait_until

#: Every broker a worker runs on: the two servers and the embedded file-system one.
ALL_BROKERS = (*BROKERS, "embedded")

#: Jobs per message in these tests.
BATCH = 16


@pytest.fixture(params=ALL_BROKERS)
def fleet_settings(request: pytest.FixtureRequest, database_url: str, sim: RunningSim,
                   tmp_path: Path) -> Settings:
    """Settings on Postgres and the judge simulator, on each broker in turn."""
    broker_url = {"redis": "redis_url", "rabbitmq": "rabbitmq_url"}.get(request.param)
    return Settings(
        database_url=database_url, openai_base_url=sim.base_url, data_dir=tmp_path / "data",
        broker_url=request.getfixturevalue(broker_url) if broker_url else None,
        judge_timeout_s=2, retry_base_s=0.2, retry_max_s=2.0, visibility_timeout_s=7,
        claim_lease_s=30, batch_size=BATCH,
    )


def _jobs(metric: str, count: int) -> list[Job]:
    return [new_job(metric, parse_sample({
        "id": f"{metric}-{n}", "input": f"Question {n}?", "output": f"Answer {n}.",
        "context": [f"Fact {n}."], "reference": f"Answer {n}.",
    })) for n in range(count)]


def _enqueue(settings: Settings, jobs: list[Job]) -> None:
    enqueuer = Enqueuer(settings)
    try:
        enqueuer.send_many(jobs)
    finally:
        enqueuer.close()


def _verdicts_by_metric(store: VerdictStore) -> dict[str, int]:
    counts: dict[str, int] = {}
    for record in store.iter_verdicts():
        counts[record.key.metric] = counts.get(record.key.metric, 0) + 1
    return counts


@pytest.mark.parametrize("queues", [["bbh_match", "rag_qa"], ["rag_qa", "bbh_match"]],
                         ids=["empty first", "busy first"])
def test_a_worker_on_two_queues_drains_the_busy_one_without_waiting_on_the_empty_one(
    fleet_settings: Settings, start_worker: Callable[..., WorkerProcess],
    store: VerdictStore, queues: list[str],
) -> None:
    _enqueue(fleet_settings, _jobs("rag_qa", 1600))  # 100 messages
    start_worker(fleet_settings, queues=queues, concurrency=64)
    # A worker that waits its one second on the empty queue per message needs 100 s;
    # one that takes from the busy queue at once needs a few.
    wait_until(lambda: store.counts().verdicts == 1600, timeout_s=50, what="1600 verdicts")
    assert _verdicts_by_metric(store) == {"rag_qa": 1600}


def test_a_worker_on_three_queues_with_work_serves_all_three(
    fleet_settings: Settings, start_worker: Callable[..., WorkerProcess],
    store: VerdictStore,
) -> None:
    metrics = ["rag_qa", "bbh_match", "context_precision"]
    for metric in metrics:
        _enqueue(fleet_settings, _jobs(metric, 96))
    start_worker(fleet_settings, queues=metrics, concurrency=16)
    wait_until(lambda: store.counts().verdicts == 3 * 96, timeout_s=60, what="288 verdicts")
    assert _verdicts_by_metric(store) == dict.fromkeys(metrics, 96)
