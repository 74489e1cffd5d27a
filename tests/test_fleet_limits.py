"""The fleet at its limits: a shared rate budget, a judge that refuses access.

Worker processes against Postgres, Redis and the judge simulator over HTTP.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from evalfleet.core.message import EVALUATE_TASK, encode_batch, new_job
from evalfleet.core.sample import parse_sample
from evalfleet.core.settings import Settings
from evalfleet.judgesim import RunningSim
from evalfleet.store import VerdictStore
from tests.helpers import WorkerProcess, wait_until
from workers.app import create_app


def enqueue(settings: Settings, count: int, *, batch: int = 8) -> None:
    """``count`` rag_qa jobs in messages of ``batch``, as producers send them."""
    jobs = [new_job("rag_qa", parse_sample({
        "id": f"req-{n}", "input": f"Question {n}?", "output": f"Answer {n}.",
        "context": [f"Fact {n}."], "reference": f"Answer {n}.",
    })) for n in range(count)]
    app = create_app(settings, concurrency=1)
    for start in range(0, count, batch):
        app.send_task(EVALUATE_TASK, args=[encode_batch(jobs[start:start + batch])],
                      queue="eval.rag_qa")
    app.close()


def peak(arrivals: dict[str, int], *, window_ticks: int) -> int:
    """Most requests that arrived in any window of ``window_ticks`` x 100 ms."""
    counts = {int(tick): n for tick, n in arrivals.items()}
    first, last = min(counts), max(counts)
    return max(sum(counts.get(t, 0) for t in range(start, start + window_ticks))
               for start in range(first, last + 1))


def test_two_workers_share_one_rate_limit(
    settings: Settings, sim: RunningSim, start_worker: Callable[..., WorkerProcess],
    store: VerdictStore,
) -> None:
    limited = settings.model_copy(update={"judge_rpm": 600, "rate_limit_max_wait_s": 0.5})
    enqueue(limited, 120)
    start_worker(limited, queues=["rag_qa"], concurrency=32)
    start_worker(limited, queues=["rag_qa"], concurrency=32)
    wait_until(lambda: store.counts().verdicts == 120, timeout_s=90, what="120 verdicts")
    stats = sim.stats()
    # Ten a second for the fleet (plus the 0.1 s burst, one in flight, late ones): two
    # workers with a budget each would send twice that.
    assert peak(stats["arrivals_per_100ms"], window_ticks=20) <= 20 + 3 + 1
    assert stats["requests"] == 120  # deferred calls were never sent
    assert store.counts().dead_letters == 0


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    """Worker processes a test starts all at once; stopped at teardown."""
    workers: list[WorkerProcess] = []
    yield workers
    for worker in workers:
        worker.stop()


@pytest.mark.parametrize("workers", [2, 4])
@pytest.mark.parametrize("judge_client", ["http", "openai"])
def test_a_cold_fleet_on_a_backlog_stays_within_its_rate_limit_from_the_first_request(
    settings: Settings, sim: RunningSim, store: VerdictStore, fleet: list[WorkerProcess],
    tmp_path: Path, judge_client: str, workers: int,
) -> None:
    # 20 requests a second, 200 in any 10 s; 360 jobs keep the fleet busy for 18 s.
    limited = settings.model_copy(update={"judge_rpm": 1200, "judge_client": judge_client})
    enqueue(limited, 360)
    # Every process starts before any is ready: they reach the limiter together, each
    # with 128 calls at once (more than a default Redis pool of 100 connections).
    fleet.extend(WorkerProcess(limited, queues=["rag_qa"], concurrency=128,
                               log_path=tmp_path / f"worker-{n}.log") for n in range(workers))
    for worker in fleet:
        worker.wait_ready()
    wait_until(lambda: store.counts().verdicts == 360, timeout_s=90, what="360 verdicts")
    busiest = peak(sim.stats()["arrivals_per_100ms"], window_ticks=100)
    assert busiest <= 200 * 1.05, f"{busiest} requests in 10 s against a limit of 200"
    for worker in fleet:
        assert b"sending unpaced" not in worker.log_path.read_bytes()


def test_a_judge_refusing_access_pauses_the_metric_and_keeps_its_jobs(
    settings: Settings, sim: RunningSim, start_worker: Callable[..., WorkerProcess],
    store: VerdictStore, redis_url: str,
) -> None:
    sim.script([{"match": "", "replies": [{"status": 401, "message": "Incorrect API key"}],
                 "then": "repeat_last"}])
    enqueue(settings, 40)
    worker = start_worker(settings, queues=["rag_qa"], concurrency=16)
    wait_until(lambda: b"pausing eval.rag_qa" in worker.log_path.read_bytes(), timeout_s=30,
               what="the pause")
    time.sleep(2)  # a paused worker takes nothing more
    calls = sim.stats()["requests"]
    assert 0 < calls <= 32  # the batches it held as the pause landed, nothing after
    time.sleep(2)
    assert sim.stats()["requests"] == calls
    queue = redis.Redis.from_url(redis_url)
    assert queue.llen("eval.rag_qa") >= 3  # the jobs wait; none was dead-lettered
    assert store.counts().dead_letters == 0 and store.counts().verdicts == 0
