"""Both rate limiters (Redis, shared by the fleet; local, one process) behave the same."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator

import pytest

from evalfleet.core.ratelimit import RateLimit
from workers.limiter import LocalRateLimiter, RateLimiter, RedisRateLimiter


@pytest.fixture(params=["redis", "local"])
def limiter(request: pytest.FixtureRequest) -> Iterator[RateLimiter]:
    if request.param == "redis":
        yield RedisRateLimiter(request.getfixturevalue("redis_url"))
    else:
        yield LocalRateLimiter()


def run(coroutine: object) -> object:
    return asyncio.run(coroutine)  # type: ignore[arg-type]


def reserve_many(limiter: RateLimiter, count: int, *, budget: RateLimit, tokens: int = 1,
                 max_wait_s: float = 60.0) -> list[tuple[bool, float]]:
    async def go() -> list[tuple[bool, float]]:
        answers = []
        for _ in range(count):
            answer = await limiter.reserve("judge|m", budget=budget, tokens=tokens,
                                           max_wait_s=max_wait_s)
            answers.append((answer.granted, answer.wait_s))
        await limiter.close()
        return answers
    return run(go())  # type: ignore[return-value]


def test_requests_are_spaced(limiter: RateLimiter) -> None:
    answers = reserve_many(limiter, 5, budget=RateLimit(requests_per_minute=600))
    waits = [wait for granted, wait in answers if granted]
    assert len(waits) == 5
    # 10 per second with a 0.1 s burst: the first two go at once, then each
    # reservation waits 0.1 s more than the one before.
    assert waits[:2] == [0.0, 0.0]
    steps = [b - a for a, b in itertools.pairwise(waits[2:])]
    assert steps and all(step == pytest.approx(0.1, abs=0.02) for step in steps)


def test_a_long_wait_is_refused_and_reserves_nothing(limiter: RateLimiter) -> None:
    answers = reserve_many(limiter, 12, budget=RateLimit(requests_per_minute=600), max_wait_s=0.5)
    granted = [wait for ok, wait in answers if ok]
    refused = [wait for ok, wait in answers if not ok]
    assert 7 <= len(granted) <= 9 and refused
    assert all(wait > 0.5 for wait in refused)
    # Refusals did not move the budget: every refusal names about the same wait.
    assert max(refused) - min(refused) < 0.05


def test_tokens_and_corrections(limiter: RateLimiter) -> None:
    budget = RateLimit(tokens_per_minute=60_000)  # 1,000 tokens a second

    async def go() -> tuple[float, float]:
        await limiter.reserve("judge|m", budget=budget, tokens=2000, max_wait_s=60)
        before = (await limiter.reserve("judge|m", budget=budget, tokens=1,
                                        max_wait_s=60)).wait_s
        await limiter.correct("judge|m", budget=budget, tokens=-1500)
        after = (await limiter.reserve("judge|m", budget=budget, tokens=1,
                                       max_wait_s=60)).wait_s
        await limiter.close()
        return before, after

    before, after = run(go())  # type: ignore[misc]
    assert before == pytest.approx(1.9, abs=0.05)  # 2,000 tokens ahead, 0.1 s burst
    assert after == pytest.approx(0.4, abs=0.1)    # 1,500 of them given back


def test_no_limits_never_wait(limiter: RateLimiter) -> None:
    assert all(answer == (True, 0.0) for answer in reserve_many(limiter, 50, budget=RateLimit()))


def test_budgets_are_per_key(limiter: RateLimiter) -> None:
    budget = RateLimit(requests_per_minute=60)

    async def go() -> list[float]:
        waits = [(await limiter.reserve(key, budget=budget, tokens=1, max_wait_s=60)).wait_s
                 for key in ("a|m", "b|m", "a|m")]
        await limiter.close()
        return waits

    first_a, first_b, second_a = run(go())  # type: ignore[misc]
    assert first_a == first_b
    assert first_a == 0.0 and second_a == pytest.approx(0.9, abs=0.05)  # 1 s less burst


def test_more_calls_than_connections_wait_for_one_instead_of_failing(redis_url: str) -> None:
    """128 calls reserving at once on a pool of 4 connections: every one is answered."""
    limiter = RedisRateLimiter(redis_url, max_connections=4)
    budget = RateLimit(requests_per_minute=60_000)

    async def go() -> list[bool]:
        answers = await asyncio.gather(*(
            limiter.reserve("judge|m", budget=budget, tokens=1, max_wait_s=60.0)
            for _ in range(128)))
        await limiter.close()
        return [answer.granted for answer in answers]

    assert run(go()) == [True] * 128
