"""The judge fleet: any provider inside the fleet's concerns, many calls in flight from one
thread."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

from evalfleet.core.errors import JudgeDeferred, JudgeRejected, JudgeUnavailable
from evalfleet.core.ratelimit import RateLimit
from evalfleet.judgesim import RunningSim
from workers.breaker import Admission, CircuitBreaker
from workers.judge import (
    FLEET_ORDER,
    AsyncHttpJudge,
    JudgeFleet,
    JudgeProvider,
    JudgeReply,
    JudgeRequest,
    OpenAIJudge,
    Pacing,
    ProviderCapabilities,
    layers_for,
)
from workers.judge.cache_key import CacheKeySupport, RedisCacheKeySupport
from workers.judge.formats import FormatSupport
from workers.judge.gate import RateBudget, Ticket, estimate_tokens
from workers.limiter import LocalRateLimiter
from workers.limiter.base import Reservation
from workers.verdicts.schema import ResponseFormat


@pytest.fixture
def runner(sim: RunningSim) -> Iterator[JudgeFleet]:
    client = AsyncHttpJudge(base_url=sim.base_url, api_key="sk-test", timeout_s=5,
                            max_connections=64)
    judge_runner = JudgeFleet(client, concurrency=64)
    yield judge_runner
    judge_runner.close()


def request(n: int) -> JudgeRequest:
    return JudgeRequest(messages=[{"role": "user", "content": f"Rate answer {n}."}],
                        model="judge-sim", temperature=0.0, max_tokens=100)


def test_a_batch_is_in_flight_at_once(runner: JudgeFleet, sim: RunningSim) -> None:
    sim.configure(latency_ms=300)
    replies = runner.complete_many([request(n) for n in range(64)])
    assert all(isinstance(reply, JudgeReply) and reply.text for reply in replies)
    stats = sim.stats()
    assert stats["requests"] == 64 and stats["max_in_flight"] >= 60


def test_concurrency_is_capped(sim: RunningSim) -> None:
    client = AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=5, max_connections=8)
    capped = JudgeFleet(client, concurrency=4)
    sim.configure(latency_ms=100)
    capped.complete_many([request(n) for n in range(20)])
    capped.close()
    assert sim.stats()["max_in_flight"] == 4


def test_errors_come_back_per_request(runner: JudgeFleet, sim: RunningSim) -> None:
    sim.script([
        {"match": "answer 1.", "replies": [{"status": 429, "retry_after": 3}]},
        {"match": "answer 2.", "replies": [{"status": 401}]},
    ])
    ok, limited, denied = runner.complete_many([request(0), request(1), request(2)])
    assert isinstance(ok, JudgeReply) and ok.prompt_tokens
    assert isinstance(limited, JudgeUnavailable) and limited.retry_after_s == 3
    assert isinstance(denied, JudgeRejected) and denied.is_access_problem


def test_timeouts_and_unreachable_judges_are_transient(sim: RunningSim) -> None:
    slow = JudgeFleet(AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=0.2,
                                      max_connections=2), concurrency=2)
    sim.configure(latency_ms=1000)
    (timed_out,) = slow.complete_many([request(0)])
    slow.close()
    nowhere = JudgeFleet(AsyncHttpJudge(base_url="http://127.0.0.1:1/v1", api_key=None,
                                         timeout_s=1, max_connections=2), concurrency=2)
    (refused,) = nowhere.complete_many([request(0)])
    nowhere.close()
    assert isinstance(timed_out, JudgeUnavailable) and "timed out" in str(timed_out)
    assert isinstance(refused, JudgeUnavailable) and "cannot reach" in str(refused)


def _frozen_clock() -> float:
    """One instant for every reservation: the pacing tests are about the budget, not about
    how soon this machine's event loop reaches the second call (on a loaded machine the
    first call's setup held the loop past the 0.5 s the test allows, and the second call,
    asked later, fitted)."""
    return 1000.0


def test_a_call_that_would_wait_too_long_is_deferred_unsent(sim: RunningSim) -> None:
    pacing = Pacing(limiter=LocalRateLimiter(clock=_frozen_clock), max_wait_s=0.5,
                    budget_for=lambda model: RateLimit(requests_per_minute=60))
    paced = JudgeFleet(AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=5,
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
    guarded = JudgeFleet(AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=5,
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
    guarded = JudgeFleet(AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=5,
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
    guarded = JudgeFleet(AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=5,
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
    paced = JudgeFleet(AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=5,
                                       max_connections=8), concurrency=8, pacing=pacing)
    requests = [JudgeRequest(messages=[{"role": "user", "content": f"n {n}"}], model="m",
                             temperature=0.0, max_tokens=10, metric="rag_qa")
                for n in range(6)]
    paced.complete_many(requests)
    paced.close()
    assert [metric for metric, _ in waits] == ["rag_qa"] * 6
    assert sorted(wait for _, wait in waits)[-1] == pytest.approx(0.4, abs=0.05)


def test_the_openai_client_is_paced_by_the_same_fleet(sim: RunningSim) -> None:
    pacing = Pacing(limiter=LocalRateLimiter(clock=_frozen_clock), max_wait_s=0.5,
                    budget_for=lambda model: RateLimit(requests_per_minute=60))
    blocking = OpenAIJudge(base_url=sim.base_url, api_key=None, timeout_s=5)
    paced = JudgeFleet(blocking, concurrency=8, pacing=pacing)
    answers = paced.complete_many([request(n) for n in range(4)])
    paced.close()
    assert [type(a).__name__ for a in answers] == ["JudgeReply"] + ["JudgeDeferred"] * 3
    assert sim.stats()["requests"] == 1


def test_the_openai_client_has_a_circuit_breaker(sim: RunningSim) -> None:
    breaker = CircuitBreaker(failure_threshold=2, open_s=60)
    blocking = OpenAIJudge(base_url=sim.base_url, api_key=None, timeout_s=5)
    guarded = JudgeFleet(blocking, concurrency=1, breaker=breaker)
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
    asyncio.run(blocking.aclose())


def test_a_call_that_wakes_up_after_its_slot_takes_a_fresh_one() -> None:
    waits: list[float] = []
    budget = RateBudget(Pacing(
        limiter=LocalRateLimiter(), max_wait_s=5,
        budget_for=lambda model: RateLimit(requests_per_minute=600),
        on_wait=lambda metric, wait_s: waits.append(wait_s)), endpoint="judge")

    async def go() -> bool:
        ticket = Ticket(budget.pacing.budget_for("judge-sim"), estimate_tokens(request(0)))
        assert await budget.pace(request(0), ticket) is None
        time.sleep(0.2)  # the machine was busy: the slot passed while nothing ran
        assert budget.late(ticket)
        assert await budget.pace(request(0), ticket) is None
        return budget.late(ticket)

    assert asyncio.run(go()) is False
    assert len(waits) == 2  # a second slot, rather than going out in someone else's


def test_answers_are_handed_over_as_they_arrive(sim: RunningSim) -> None:
    client = AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=60,
                            max_connections=8)
    runner = JudgeFleet(client, concurrency=8)
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


def test_every_client_hands_over_each_answer_once(runner: JudgeFleet,
                                                  sim: RunningSim) -> None:
    paced = JudgeFleet(OpenAIJudge(base_url=sim.base_url, api_key=None, timeout_s=5),
                       concurrency=8)
    try:
        for client in (runner, paced):
            chunks = list(client.answers([request(n) for n in range(6)]))
            assert sorted(index for chunk in chunks for index, _ in chunk) == list(range(6))
            assert list(client.answers([])) == []
    finally:
        paced.close()
    assert sim.stats()["requests"] == 12


class _Seen:
    """Which fleet concern saw a call, in order."""

    def __init__(self) -> None:
        self.order: list[str] = []


class _CountingBreaker(CircuitBreaker):
    def __init__(self, seen: _Seen) -> None:
        super().__init__()
        self.seen = seen

    def admit(self, now_s: float) -> Admission:
        self.seen.order.append("breaker")
        return super().admit(now_s)


class _CountingFormats(FormatSupport):
    def __init__(self, seen: _Seen) -> None:
        super().__init__("json_schema")
        self.seen = seen

    def mode_for(self, model: str) -> ResponseFormat:
        self.seen.order.append("response_format")
        return super().mode_for(model)


class _CountingLimiter(LocalRateLimiter):
    def __init__(self, seen: _Seen) -> None:
        super().__init__()
        self.seen = seen

    async def reserve(self, key: str, *, budget: RateLimit, tokens: int,
                      max_wait_s: float) -> Reservation:
        self.seen.order.append("rate_limit")
        return await super().reserve(key, budget=budget, tokens=tokens, max_wait_s=max_wait_s)


def _provider(kind: str, base_url: str) -> JudgeProvider:
    if kind == "http":
        return AsyncHttpJudge(base_url=base_url, api_key=None, timeout_s=5, max_connections=4)
    return OpenAIJudge(base_url=base_url, api_key=None, timeout_s=5)


@pytest.mark.parametrize("kind", ["http", "openai"])
def test_every_provider_passes_each_fleet_concern_once_in_one_order(
    kind: str, sim: RunningSim,
) -> None:
    seen = _Seen()
    fleet = JudgeFleet(_provider(kind, sim.base_url), concurrency=4,
                       breaker=_CountingBreaker(seen), formats=_CountingFormats(seen),
                       pacing=Pacing(limiter=_CountingLimiter(seen), max_wait_s=5,
                                     budget_for=lambda model: RateLimit(requests_per_minute=600)))
    try:
        (answer,) = fleet.complete_many([request(0)])
    finally:
        fleet.close()
    assert isinstance(answer, JudgeReply)
    assert fleet.order == FLEET_ORDER == layers_for(fleet.provider.capabilities)
    # One call: each concern that keeps state saw it once, outermost first.
    assert seen.order == ["breaker", "response_format", "rate_limit"]
    assert sim.stats()["requests"] == 1


@pytest.mark.parametrize(("capabilities", "order"), [
    (ProviderCapabilities(name="http"), FLEET_ORDER),
    (ProviderCapabilities(name="openai"), FLEET_ORDER),
    # Submitted now, collected later: no call per request to hold a slot or a rate budget,
    # and its breaker guards the Batch API's requests (BatchApi), not each line.
    (ProviderCapabilities(name="batch", kind="batch"),
     ("deadline", "response_format")),
])
def test_which_fleet_concerns_apply_to_which_kind_of_provider(
    capabilities: ProviderCapabilities, order: tuple[str, ...],
) -> None:
    assert layers_for(capabilities) == order
    assert len(set(order)) == len(order)


def test_a_refused_response_format_steps_down_without_tripping_the_breaker(
    sim: RunningSim,
) -> None:
    # llama-cpp-python answers json_schema with a 500: many of them must not open the circuit.
    sim.configure(refused_response_formats=["json_schema"], server_style="llama_cpp_python")
    breaker = CircuitBreaker(failure_threshold=2)
    formats = FormatSupport("json_schema")
    steps: list[tuple[str, str]] = []
    fleet = JudgeFleet(_provider("http", sim.base_url), concurrency=4, breaker=breaker,
                       formats=formats, on_step_down=lambda model, mode: steps.append(
                           (model, mode)))
    strict = replace(request(0), response_format={
        "type": "json_schema", "json_schema": {"name": "m", "schema": {"type": "object"}}})
    try:
        answers = fleet.complete_many([replace(strict, max_tokens=n + 10) for n in range(4)])
    finally:
        fleet.close()
    assert all(isinstance(answer, JudgeReply) for answer in answers)
    assert breaker.state == "closed" and formats.mode_for("judge-sim") == "json_object_schema"
    assert steps == [("judge-sim", "json_object_schema")]  # learnt once
    assert sim.stats()["by_status"]["500"] <= 4


@pytest.mark.parametrize("style", ["openai", "llama_cpp_python", "vllm"])
@pytest.mark.parametrize("kind", ["http", "openai"])
def test_a_refused_prompt_cache_key_is_dropped_and_the_call_sent_again(
    style: str, kind: str, sim: RunningSim,
) -> None:
    # Azure OpenAI answers an unknown parameter with a 400, llama-cpp-python's validation
    # with a 500: both drop the key for the model, once, and no call fails.
    sim.configure(refused_parameters=["prompt_cache_key"], server_style=style)
    breaker = CircuitBreaker(failure_threshold=2)
    support = CacheKeySupport()
    fleet = JudgeFleet(_provider(kind, sim.base_url), concurrency=1, breaker=breaker,
                       cache_keys=support)
    keyed = [replace(request(n), prompt_cache_key="evalfleet:m:v1") for n in range(4)]
    try:
        answers = fleet.complete_many(keyed)
    finally:
        fleet.close()
    assert all(isinstance(answer, JudgeReply) for answer in answers)
    assert breaker.state == "closed" and not support.accepts("judge-sim")
    stats = sim.stats()
    # One call at a time: the first is refused and sent again without it, the rest go
    # without it at once.
    assert stats["requests"] == 5 and stats["by_outcome"]["parameter_refused"] == 1
    assert stats["by_prompt_cache_key"] == {"none": 4}


def test_an_accepted_prompt_cache_key_is_sent(sim: RunningSim) -> None:
    fleet = JudgeFleet(_provider("http", sim.base_url), concurrency=4)
    try:
        answers = fleet.complete_many([replace(request(n), prompt_cache_key="evalfleet:m:v1")
                                       for n in range(3)] + [request(9)])
    finally:
        fleet.close()
    assert all(isinstance(answer, JudgeReply) for answer in answers)
    assert sim.stats()["by_prompt_cache_key"] == {"evalfleet:m:v1": 3, "none": 1}


def test_a_refusal_learnt_by_one_worker_is_shared_by_the_fleet(redis_url: str) -> None:
    now = [0.0]
    first = RedisCacheKeySupport(url=redis_url, endpoint="http://judge:8000/v1",
                                 clock=lambda: now[0])
    second = RedisCacheKeySupport(url=redis_url, endpoint="http://judge:8000/v1",
                                  refresh_s=10, clock=lambda: now[0])
    other = RedisCacheKeySupport(url=redis_url, endpoint="http://other:8000/v1")
    assert second.accepts("m")  # read once now
    assert first.refuse("m") and not first.refuse("m") and not first.accepts("m")
    assert second.accepts("m")  # not re-read yet
    now[0] = 10.0
    assert not second.accepts("m") and second.accepts("n") and other.accepts("m")
