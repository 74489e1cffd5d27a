"""Shutdown within a grace period: the deadline, the judge that gives up, and SIGTERM on a
worker with jobs in flight, on every broker."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from evalfleet.core.errors import WorkerShuttingDown
from evalfleet.core.settings import Settings
from evalfleet.judgesim import RunningSim
from evalfleet.store import VerdictStore
from tests.brokers import EVERY_BROKER
from tests.helpers import WorkerProcess, wait_until
from tests.test_fleet import cli, export, make_samples, write_jsonl
from workers.judge import JudgeClient, JudgeReply, JudgeRequest
from workers.runtime import build_judge, task_slots
from workers.shutdown import ShutdownDeadline


def test_the_deadline_starts_once_and_expires_after_the_grace_period() -> None:
    deadline = ShutdownDeadline()
    assert not deadline.draining and not deadline.expired
    deadline.begin(0.2)
    deadline.begin(60.0)  # a second SIGTERM does not move the deadline
    assert deadline.draining and not deadline.expired
    wait_until(lambda: deadline.expired, timeout_s=2, what="the deadline", interval_s=0.02)


def test_no_grace_period_expires_at_once_and_expire_ends_it_early() -> None:
    at_once = ShutdownDeadline()
    at_once.begin(0)
    assert at_once.expired
    early = ShutdownDeadline()
    early.begin(3600)
    early.expire()
    assert early.expired


def request(n: int) -> JudgeRequest:
    return JudgeRequest(messages=[{"role": "user", "content": f"Rate answer {n} from 0 to 1."}],
                        model="judge-sim", temperature=0.0, max_tokens=50)


@pytest.fixture
def deadline() -> ShutdownDeadline:
    return ShutdownDeadline()


@pytest.fixture(params=["http", "openai"])
def judge(request: pytest.FixtureRequest, settings: Settings,
          deadline: ShutdownDeadline) -> Iterator[JudgeClient]:
    """The worker's judge, with either provider: the deadline is the fleet's, whichever."""
    client = build_judge(settings.model_copy(update={"judge_timeout_s": 20,
                                                     "judge_client": request.param}),
                         concurrency=8, deadline=deadline)
    yield client
    client.close()


def test_before_the_deadline_replies_pass_through(judge: JudgeClient, sim: RunningSim) -> None:
    replies = judge.complete_many([request(1), request(2)])
    assert all(isinstance(reply, JudgeReply) for reply in replies)
    assert sim.stats()["requests"] == 2


def test_at_the_deadline_the_judge_stops_waiting(judge: JudgeClient, sim: RunningSim,
                                                 deadline: ShutdownDeadline) -> None:
    sim.configure(latency_ms=10_000)
    deadline.begin(0.5)
    started = time.monotonic()
    with pytest.raises(WorkerShuttingDown, match="2 judge request"):
        judge.complete_many([request(1), request(2)])
    assert 0.4 < time.monotonic() - started < 2.0


def test_after_the_deadline_the_judge_is_not_called(judge: JudgeClient, sim: RunningSim,
                                                    deadline: ShutdownDeadline) -> None:
    deadline.expire()
    with pytest.raises(WorkerShuttingDown):
        judge.complete_many([request(1)])
    assert sim.stats()["requests"] == 0


#: Samples produced; the worker takes what its task threads hold (64 here), the rest waits.
SAMPLES = 80
#: Judge calls the worker keeps in flight.
CONCURRENCY = 32


def sigterm(worker: WorkerProcess, *, timeout_s: float) -> float:
    """SIGTERM the worker; seconds until it exited."""
    started = time.monotonic()
    os.killpg(worker.process.pid, signal.SIGTERM)
    worker.process.wait(timeout=timeout_s)
    return time.monotonic() - started


def produce_and_start(settings: Settings, sim: RunningSim, tmp_path: Path,
                      start_worker: Callable[..., WorkerProcess]) -> WorkerProcess:
    samples = make_samples(SAMPLES, prefix="term")
    assert cli(settings, "produce", str(write_jsonl(tmp_path / "s.jsonl", samples)),
               "--metric", "rag_qa").exit_code == 0
    worker = start_worker(settings, queues=["rag_qa"], concurrency=CONCURRENCY)
    wait_until(lambda: sim.stats()["in_flight"] == CONCURRENCY, timeout_s=30,
               what="the worker's judge calls in flight")
    return worker


def one_verdict_each(settings: Settings, *, samples: int = SAMPLES,
                     prefix: str = "term") -> Counter[str]:
    per_sample = Counter(verdict["sample_id"] for verdict in export(settings))
    assert set(per_sample) == {f"{prefix}-{n:04d}" for n in range(samples)}
    assert set(per_sample.values()) == {1}
    return per_sample


@EVERY_BROKER
def test_sigterm_lets_running_jobs_finish_within_the_grace_period(
    settings: Settings, sim: RunningSim, start_worker: Callable[..., WorkerProcess],
    store: VerdictStore, tmp_path: Path,
) -> None:
    settings = settings.model_copy(update={"shutdown_grace_s": 15, "judge_timeout_s": 5,
                                           "visibility_timeout_s": 15})
    sim.configure(latency_ms=1500)
    worker = produce_and_start(settings, sim, tmp_path, start_worker)
    exit_s = sigterm(worker, timeout_s=30)
    # Two rounds of calls (64 jobs held, 32 in flight at a time), well within the grace.
    held = task_slots(settings, concurrency=CONCURRENCY) * settings.broker.batch_size
    assert store.counts().verdicts == held
    assert exit_s < settings.worker.shutdown_grace_s, exit_s
    assert b"go back to the queue" not in worker.log_path.read_bytes()
    sim.configure(latency_ms=5)
    start_worker(settings, queues=["rag_qa"], concurrency=CONCURRENCY)
    wait_until(lambda: store.counts().verdicts == SAMPLES, timeout_s=60, what="every verdict")
    one_verdict_each(settings)
    assert sim.stats()["requests"] == SAMPLES  # nothing judged twice
    assert store.counts().dead_letters == 0
    print(f"\nshutdown with running jobs finishing: {exit_s:.2f} s "
          f"(grace {settings.worker.shutdown_grace_s:g} s, judge latency 1.5 s)")


@EVERY_BROKER
def test_sigterm_puts_back_jobs_still_waiting_at_the_deadline(
    settings: Settings, sim: RunningSim, start_worker: Callable[..., WorkerProcess],
    store: VerdictStore, tmp_path: Path,
) -> None:
    settings = settings.model_copy(update={"shutdown_grace_s": 2, "judge_timeout_s": 12,
                                           "visibility_timeout_s": 30})
    sim.configure(latency_ms=10_000)  # slower than the grace period
    worker = produce_and_start(settings, sim, tmp_path, start_worker)
    exit_s = sigterm(worker, timeout_s=30)
    assert settings.worker.shutdown_grace_s <= exit_s < settings.worker.shutdown_grace_s + 5, exit_s
    assert store.counts().verdicts == 0
    log = worker.log_path.read_text()
    held = task_slots(settings, concurrency=CONCURRENCY)
    assert log.count("go back to the queue") == held, log
    sim.configure(latency_ms=5)
    start_worker(settings, queues=["rag_qa"], concurrency=CONCURRENCY)
    wait_until(lambda: store.counts().verdicts == SAMPLES, timeout_s=60, what="every verdict")
    one_verdict_each(settings)
    # The calls in flight at the deadline were made again, and only those.
    calls = sim.stats()["by_prompt"]
    assert sum(calls.values()) == SAMPLES + CONCURRENCY
    assert Counter(calls.values()) == {1: SAMPLES - CONCURRENCY, 2: CONCURRENCY}
    assert store.counts().dead_letters == 0
    print(f"\nshutdown at the deadline: {exit_s:.2f} s "
          f"(grace {settings.worker.shutdown_grace_s:g} s, "
          f"judge latency 10 s, {CONCURRENCY} calls abandoned and made again)")


#: Judge calls the killed worker keeps in flight.
KILL_CONCURRENCY = 8
#: Samples of the SIGKILL test: three messages of 16, two held by the worker's threads.
KILL_SAMPLES = 48
#: Calls the judge answers before it stops answering (each verdict durable at once).
ANSWERED_BEFORE_KILL = 12


def _stable_before_kill(sim: RunningSim, store: VerdictStore, worker: WorkerProcess,
                        looks: list[int]) -> bool:
    """Every answer so far is stored, the worker's calls in flight are the held ones and
    both its deliveries still run (no held call timed out yet), in two looks in a row."""
    stats = sim.stats()
    answered = sum(stats["answered_by_prompt"].values())
    steady = (stats["in_flight"] == KILL_CONCURRENCY and answered == ANSWERED_BEFORE_KILL
              and stats["requests"] == ANSWERED_BEFORE_KILL + KILL_CONCURRENCY
              and store.counts().verdicts == answered
              and b"succeeded" not in worker.log_path.read_bytes())
    looks.append(int(steady))
    return looks[-2:] == [1, 1]


@EVERY_BROKER
def test_sigkill_wastes_only_the_judge_calls_in_flight(
    settings: Settings, sim: RunningSim, start_worker: Callable[..., WorkerProcess],
    store: VerdictStore, tmp_path: Path,
) -> None:
    # The held calls time out after judge_timeout_s: the kill comes well before. The
    # visibility timeout is just above two judge calls, so the killed worker's messages
    # come back within a minute.
    settings = settings.model_copy(update={"judge_timeout_s": 15, "visibility_timeout_s": 33,
                                           "claim_lease_s": 31, "batch_size": 16})
    # The first calls are answered at once; the next KILL_CONCURRENCY are held (far past
    # the judge timeout), so the worker sits with its slots full and nothing moves: then
    # the calls in flight are known. Later calls (after the restart) answer at once.
    sim.script([{"match": "", "then": "default",
                 "replies": [{"delay_ms": 5}] * ANSWERED_BEFORE_KILL
                 + [{"delay_ms": 600_000}] * KILL_CONCURRENCY}])
    samples = make_samples(KILL_SAMPLES, prefix="kill")
    assert cli(settings, "produce", str(write_jsonl(tmp_path / "s.jsonl", samples)),
               "--metric", "rag_qa").exit_code == 0
    worker = start_worker(settings, queues=["rag_qa"], concurrency=KILL_CONCURRENCY)
    looks: list[int] = []
    wait_until(lambda: _stable_before_kill(sim, store, worker, looks), timeout_s=60,
               interval_s=0.3,
               what=f"{ANSWERED_BEFORE_KILL} answers stored and {KILL_CONCURRENCY} calls "
                    "in flight")
    at_kill = sim.stats()
    in_flight = set(at_kill["by_prompt"]) - set(at_kill["answered_by_prompt"])
    worker.kill()
    assert b"succeeded" not in worker.log_path.read_bytes()  # killed before any timeout
    stored_at_kill = {verdict["sample_id"] for verdict in export(settings)}
    assert len(stored_at_kill) == ANSWERED_BEFORE_KILL
    start_worker(settings, queues=["rag_qa"], concurrency=KILL_CONCURRENCY)
    wait_until(lambda: store.counts().verdicts == KILL_SAMPLES, timeout_s=120,
               what="every verdict after the restart")
    one_verdict_each(settings, samples=KILL_SAMPLES, prefix="kill")
    calls = sim.stats()["by_prompt"]
    extra = sum(calls.values()) - KILL_SAMPLES
    # Only calls in flight at the kill were made again: none of the answered ones.
    assert extra <= KILL_CONCURRENCY, (extra, calls)
    again = {prompt for prompt, count in calls.items() if count > 1}
    assert again <= in_flight
    assert len(again) == extra
    assert store.counts().dead_letters == 0
    print(f"\nSIGKILL with {KILL_CONCURRENCY} calls in flight and {ANSWERED_BEFORE_KILL} "
          f"answered: {extra} extra judge calls")
