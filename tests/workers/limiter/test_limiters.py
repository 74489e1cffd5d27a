"""Both rate limiters (Redis, shared by the fleet; local, one process) behave the same."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Reserved:
    """One reservation seen by the test's clock: the limiter read its own clock (Redis's,
    or the process's) somewhere between ``called`` and ``answered``."""

    granted: bool
    wait_s: float
    called: float
    answered: float

    @property
    def sends_at(self) -> float:
        """When the caller may send, by the test's clock (late by at most :attr:`slack`)."""
        return self.called + self.wait_s

    @property
    def slack(self) -> float:
        return self.answered - self.called


async def reserve(limiter: RateLimiter, key: str = "judge|m", *, budget: RateLimit,
                  tokens: int = 1, max_wait_s: float = 60.0) -> Reserved:
    called = time.monotonic()
    answer = await limiter.reserve(key, budget=budget, tokens=tokens, max_wait_s=max_wait_s)
    return Reserved(answer.granted, answer.wait_s, called, time.monotonic())


def reserve_many(limiter: RateLimiter, count: int, *, budget: RateLimit, tokens: int = 1,
                 max_wait_s: float = 60.0) -> list[Reserved]:
    async def go() -> list[Reserved]:
        answers = [await reserve(limiter, budget=budget, tokens=tokens, max_wait_s=max_wait_s)
                   for _ in range(count)]
        await limiter.close()
        return answers
    return run(go())  # type: ignore[return-value]


def apart(later: Reserved, earlier: Reserved, seconds: float) -> bool:
    """``later`` may send ``seconds`` after ``earlier``, as far as the two calls' own
    durations let the test tell (a loaded machine delays calls; it cannot move the pace)."""
    tolerance = later.slack + earlier.slack + 0.002
    return abs(later.sends_at - earlier.sends_at - seconds) <= tolerance


def test_requests_are_spaced(limiter: RateLimiter) -> None:
    answers = reserve_many(limiter, 5, budget=RateLimit(requests_per_minute=600))
    assert all(answer.granted for answer in answers)
    # 10 per second with a 0.1 s burst: the first two go at once, then each goes 0.1 s
    # after the one before (or at once, had the machine called it later than that).
    assert [answer.wait_s for answer in answers[:2]] == [0.0, 0.0]
    for earlier, later in itertools.pairwise(answers[1:]):
        if later.wait_s > 0:
            assert apart(later, earlier, 0.1), (earlier, later)
        else:
            assert later.answered >= earlier.sends_at + 0.1 - 0.002


def test_a_long_wait_is_refused_and_reserves_nothing(limiter: RateLimiter) -> None:
    answers = reserve_many(limiter, 12, budget=RateLimit(requests_per_minute=600), max_wait_s=0.5)
    granted = [answer for answer in answers if answer.granted]
    refused = [answer for answer in answers if not answer.granted]
    assert len(granted) >= 7 and refused  # more only if the machine called them late
    assert all(answer.wait_s <= 0.5 for answer in granted)
    assert all(answer.wait_s > 0.5 for answer in refused)
    # Refusals did not move the budget: each names the same moment to send at.
    moments = [answer.sends_at for answer in refused]
    assert max(moments) - min(moments) <= max(answer.slack for answer in refused) + 0.002


def test_tokens_and_corrections(limiter: RateLimiter) -> None:
    budget = RateLimit(tokens_per_minute=60_000)  # 1,000 tokens a second

    async def go() -> tuple[Reserved, Reserved, Reserved]:
        first = await reserve(limiter, budget=budget, tokens=2000)
        before = await reserve(limiter, budget=budget, tokens=1)
        await limiter.correct("judge|m", budget=budget, tokens=-1500)
        after = await reserve(limiter, budget=budget, tokens=1)
        await limiter.close()
        return first, before, after

    first, before, after = run(go())  # type: ignore[misc]
    assert first.wait_s == 0.0
    assert apart(before, first, 1.9)  # 2,000 tokens ahead, 0.1 s burst
    assert apart(after, first, 0.401)  # 1,500 of them given back, the 1 token kept


def test_no_limits_never_wait(limiter: RateLimiter) -> None:
    answers = reserve_many(limiter, 50, budget=RateLimit())
    assert all((answer.granted, answer.wait_s) == (True, 0.0) for answer in answers)


def test_budgets_are_per_key(limiter: RateLimiter) -> None:
    budget = RateLimit(requests_per_minute=60)

    async def go() -> list[Reserved]:
        answers = [await reserve(limiter, key, budget=budget) for key in ("a|m", "b|m", "a|m")]
        await limiter.close()
        return answers

    first_a, first_b, second_a = run(go())  # type: ignore[misc]
    assert first_a.wait_s == first_b.wait_s == 0.0
    assert apart(second_a, first_a, 0.9)  # 1 s less the burst


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
