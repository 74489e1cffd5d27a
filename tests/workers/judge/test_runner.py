"""The HTTP runner keeps many judge calls in flight from one thread."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from evalfleet.core.errors import JudgeDeferred, JudgeRejected, JudgeUnavailable
from evalfleet.core.ratelimit import RateLimit
from evalfleet.judgesim import RunningSim
from workers.breaker import CircuitBreaker
from workers.judge import (
    AsyncHttpJudge,
    CallGate,
    JudgeReply,
    JudgeRequest,
    JudgeRunner,
    OpenAIJudge,
    PacedJudge,
)
from workers.judge.runner import Pacing
from workers.limiter import LocalRateLimiter


@pytest.fixture
def runner(sim: RunningSim) -> Iterator[JudgeRunner]:
    client = AsyncHttpJudge(base_url=sim.base_url, api_key="sk-test", timeout_s=5,
                            max_connections=64)
    judge_runner = JudgeRunner(client, concurrency=64)
    yield judge_runner
    judge_runner.close()


def request(n: int) -> JudgeRequest:
    return JudgeRequest(messages=[{"role": "user", "content": f"Rate answer {n}."}],
                        model="judge-sim", temperature=0.0, max_tokens=100)


def test_a_batch_is_in_flight_at_once(runner: JudgeRunner, sim: RunningSim) -> None:
    sim.configure(latency_ms=300)
    replies = runner.complete_many([request(n) for n in range(64)])
    assert all(isinstance(reply, JudgeReply) and reply.text for reply in replies)
    stats = sim.stats()
    assert stats["requests"] == 64 and stats["max_in_flight"] >= 60


def test_concurrency_is_capped(sim: RunningSim) -> None:
    client = AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=5, max_connections=8)
    capped = JudgeRunner(client, concurrency=4)
    sim.configure(latency_ms=100)
    capped.complete_many([request(n) for n in range(20)])
    capped.close()
    assert sim.stats()["max_in_flight"] == 4


def test_errors_come_back_per_request(runner: JudgeRunner, sim: RunningSim) -> None:
    sim.script([
        {"match": "answer 1.", "replies": [{"status": 429, "retry_after": 3}]},
        {"match": "answer 2.", "replies": [{"status": 401}]},
    ])
    ok, limited, denied = runner.complete_many([request(0), request(1), request(2)])
    assert isinstance(ok, JudgeReply) and ok.prompt_tokens
    assert isinstance(limited, JudgeUnavailable) and limited.retry_after_s == 3
    assert isinstance(denied, JudgeRejected) and denied.is_access_problem


def test_timeouts_and_unreachable_judges_are_transient(sim: RunningSim) -> None:
    slow = JudgeRunner(AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=0.2,
                                      max_connections=2), concurrency=2)
    sim.configure(latency_ms=1000)
    (timed_out,) = slow.complete_many([request(0)])
    slow.close()
    nowhere = JudgeRunner(AsyncHttpJudge(base_url="http://127.0.0.1:1/v1", api_key=None,
                                         timeout_s=1, max_connections=2), concurrency=2)
    (refused,) = nowhere.complete_many([request(0)])
    nowhere.close()
    assert isinstance(timed_out, JudgeUnavailable) and "timed out" in str(timed_out)
    assert isinstance(refused, JudgeUnavailable) and "cannot reach" in str(refused)


def test_a_call_that_would_wait_too_long_is_deferred_unsent(sim: RunningSim) -> None:
    pacing = Pacing(limiter=LocalRateLimiter(), max_wait_s=0.5,
                    budget_for=lambda model: RateLimit(requests_per_minute=60))
    paced = JudgeRunner(AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=5,
                                       max_connections=8), concurrency=8, pacing=pacing)
    answers = paced.complete_many([request(n) for n in range(5)])
    paced.close()
    sent = [a for a in answers if isinstance(a, JudgeReply)]
    deferred = [a for a in answers if isinstance(a, JudgeDeferred)]
    assert len(sent) == 1 and len(deferred) == 4  # 1 a second: the next is 0.9 s away
    assert all(d.retry_after_s > 0.5 for d in deferred)
    assert sim.stats()["requests"] == 1


def test_the_circuit_opens_on_a_down_judge_and_closes_after_a_good_probe(
    sim: RunningSim,
) -> None:
    breaker = CircuitBreaker(failure_threshold=3, open_s=0.3)
    guarded = JudgeRunner(AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=5,
                                         max_connections=2), concurrency=1, breaker=breaker)
    sim.script([{"match": "", "replies": [{"status": 503}], "then": "repeat_last"}])
    answers = [guarded.complete_many([request(n)])[0] for n in range(5)]
    assert [type(a).__name__ for a in answers] == ["JudgeUnavailable"] * 3 + ["JudgeDeferred"] * 2
    assert sim.stats()["requests"] == 3 and breaker.state == "open"
    sim.reset()
    time.sleep(0.35)  # the circuit's pause, so the next call is the probe
    (probe,) = guarded.complete_many([request(9)])
    guarded.close()
    assert isinstance(probe, JudgeReply) and breaker.state == "closed"


def test_a_probe_answered_with_429_closes_the_circuit(sim: RunningSim) -> None:
    # A busy judge is up: the probe's 429 must not leave the circuit half-open for good.
    breaker = CircuitBreaker(failure_threshold=2, open_s=0.2)
    guarded = JudgeRunner(AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=5,
                                         max_connections=2), concurrency=1, breaker=breaker)
    sim.script([{"match": "", "replies": [{"status": 500}, {"status": 500},
                                          {"status": 429, "retry_after": 1}],
                 "then": "repeat_last"}])
    guarded.complete_many([request(0)])
    guarded.complete_many([request(1)])
    assert breaker.state == "open"
    time.sleep(0.25)
    (probe,) = guarded.complete_many([request(2)])
    sim.reset()
    (after,) = guarded.complete_many([request(3)])
    guarded.close()
    assert isinstance(probe, JudgeUnavailable) and probe.status_code == 429
    assert isinstance(after, JudgeReply) and breaker.state == "closed"


def test_rate_limits_do_not_open_the_circuit(sim: RunningSim) -> None:
    breaker = CircuitBreaker(failure_threshold=2)
    guarded = JudgeRunner(AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=5,
                                         max_connections=2), concurrency=1, breaker=breaker)
    sim.script([{"match": "", "replies": [{"status": 429, "retry_after": 1}],
                 "then": "repeat_last"}])
    guarded.complete_many([request(n) for n in range(4)])
    guarded.close()
    assert breaker.state == "closed"


def test_waits_for_rate_budget_are_reported_per_metric(sim: RunningSim) -> None:
    waits: list[tuple[str, float]] = []
    pacing = Pacing(limiter=LocalRateLimiter(), max_wait_s=5,
                    budget_for=lambda model: RateLimit(requests_per_minute=600),
                    on_wait=lambda metric, wait_s: waits.append((metric, wait_s)))
    paced = JudgeRunner(AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=5,
                                       max_connections=8), concurrency=8, pacing=pacing)
    requests = [JudgeRequest(messages=[{"role": "user", "content": f"n {n}"}], model="m",
                             temperature=0.0, max_tokens=10, metric="rag_qa")
                for n in range(6)]
    paced.complete_many(requests)
    paced.close()
    assert [metric for metric, _ in waits] == ["rag_qa"] * 6
    assert sorted(wait for _, wait in waits)[-1] == pytest.approx(0.4, abs=0.05)


def test_the_openai_client_is_paced_through_the_same_gate(sim: RunningSim) -> None:
    pacing = Pacing(limiter=LocalRateLimiter(), max_wait_s=0.5,
                    budget_for=lambda model: RateLimit(requests_per_minute=60))
    blocking = OpenAIJudge(base_url=sim.base_url, api_key=None, timeout_s=5)
    paced = PacedJudge(blocking, endpoint=blocking.endpoint, pacing=pacing)
    answers = paced.complete_many([request(n) for n in range(4)])
    paced.close()
    assert [type(a).__name__ for a in answers] == ["JudgeReply"] + ["JudgeDeferred"] * 3
    assert sim.stats()["requests"] == 1


def test_the_openai_client_has_a_circuit_breaker(sim: RunningSim) -> None:
    breaker = CircuitBreaker(failure_threshold=2, open_s=60)
    blocking = OpenAIJudge(base_url=sim.base_url, api_key=None, timeout_s=5)
    guarded = PacedJudge(blocking, endpoint=blocking.endpoint, breaker=breaker)
    sim.script([{"match": "", "replies": [{"status": 503}], "then": "repeat_last"}])
    answers = guarded.complete_many([request(n) for n in range(4)])
    guarded.close()
    assert [type(a).__name__ for a in answers] == ["JudgeUnavailable"] * 2 + ["JudgeDeferred"] * 2
    assert sim.stats()["requests"] == 2 and breaker.state == "open"


def test_both_clients_name_the_endpoint_alike(sim: RunningSim) -> None:
    """The rate budget is keyed by endpoint: a fleet mixing clients shares one budget."""
    http = AsyncHttpJudge(base_url=sim.base_url + "/", api_key=None, timeout_s=1,
                          max_connections=1)
    blocking = OpenAIJudge(base_url=sim.base_url, api_key=None, timeout_s=1)
    assert http.endpoint == blocking.endpoint
    blocking.close()


def test_a_call_that_wakes_up_after_its_slot_takes_a_fresh_one() -> None:
    waits: list[float] = []
    gate = CallGate(endpoint="judge", pacing=Pacing(
        limiter=LocalRateLimiter(), max_wait_s=5,
        budget_for=lambda model: RateLimit(requests_per_minute=600),
        on_wait=lambda metric, wait_s: waits.append(wait_s)))

    async def go() -> bool:
        ticket = await gate.enter(request(0))
        assert not isinstance(ticket, JudgeDeferred)
        time.sleep(0.2)  # the machine was busy: the slot passed while nothing ran
        assert gate.late(ticket)
        assert await gate.pace(request(0), ticket) is None
        return gate.late(ticket)

    assert asyncio.run(go()) is False
    assert len(waits) == 2  # a second slot, rather than going out in someone else's


def test_answers_are_handed_over_as_they_arrive(sim: RunningSim) -> None:
    client = AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=60,
                            max_connections=8)
    runner = JudgeRunner(client, concurrency=8)
    sim.script([{"match": "answer 3.", "replies": [{"delay_ms": 30_000}]}])
    try:
        answers = runner.answers([request(n) for n in range(5)])
        taken: list[int] = []
        while len(taken) < 4:  # the four quick ones, without waiting for the slow one
            chunk = next(answers)
            assert all(isinstance(answer, JudgeReply) for _, answer in chunk)
            taken += [index for index, _ in chunk]
        assert sorted(taken) == [0, 1, 2, 4]
        assert sim.stats()["in_flight"] == 1
    finally:
        runner.close()


def test_every_client_hands_over_each_answer_once(runner: JudgeRunner,
                                                  sim: RunningSim) -> None:
    paced = PacedJudge(OpenAIJudge(base_url=sim.base_url, api_key=None, timeout_s=5),
                       endpoint=sim.base_url)
    try:
        for client in (runner, paced):
            chunks = list(client.answers([request(n) for n in range(6)]))
            assert sorted(index for chunk in chunks for index, _ in chunk) == list(range(6))
            assert list(client.answers([])) == []
    finally:
        paced.close()
    assert sim.stats()["requests"] == 12
