"""The adaptive limit on calls in flight: the fleet's one value in real Redis, and one
process's, move the same way (workers/limiter/adaptive.py, workers/limiter/slots.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis

from workers.limiter.adaptive import Aimd
from workers.limiter.slots import (
    KEY_PREFIX,
    LIMIT_SUFFIX,
    STATE_LIFE_S,
    LocalSlots,
    RedisSlots,
    Report,
    Slots,
)

KEY = "http://judge|m"


@pytest.fixture(params=["redis", "local"])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "redis":
        request.getfixturevalue("redis_url")
    yield request.param


def reporters(backend: str, redis_url: str | None, count: int) -> list[Slots]:
    """``count`` workers' slot stores: one Redis client each, or one process's store."""
    if backend == "redis":
        assert redis_url is not None
        return [RedisSlots(redis_url) for _ in range(count)]
    return [LocalSlots()] * count


async def answer(slots: Slots, *, latency_s: float, in_flight: int = 1,
                 overloaded: bool = False, most: int = 64) -> float:
    """One call answered while ``in_flight`` calls (itself included) were out; the limit
    after it."""
    tokens = [await slots.take(KEY, limit=most, lease_s=10, adaptive=True)
              for _ in range(in_flight)]
    assert None not in tokens, "the limit let fewer calls out than asked"
    first, *rest = [token for token in tokens if token is not None]
    await slots.give_back(KEY, first, limit=most,
                          report=Report(latency_s, overloaded=overloaded))
    for token in rest:
        await slots.give_back(KEY, token)
    limit = await slots.adapted(KEY)
    assert limit is not None
    return limit


async def grow_to(slots: Slots, limit: int, *, latency_s: float = 0.1) -> None:
    """Slow start with the limit used, up to ``limit``."""
    current = await slots.adapted(KEY) or 1.0
    while current < limit:
        current = await answer(slots, latency_s=latency_s, in_flight=int(current))


@pytest.fixture
def url(request: pytest.FixtureRequest, backend: str) -> str | None:
    return request.getfixturevalue("redis_url") if backend == "redis" else None


def test_the_slow_start_adds_a_call_per_answer_then_one_per_round_trip(
        backend: str, url: str | None) -> None:
    async def go() -> list[float]:
        (slots,) = reporters(backend, url, 1)
        seen = [await answer(slots, latency_s=0.1, in_flight=n) for n in (1, 2, 3)]
        seen.append(await answer(slots, latency_s=0.0, overloaded=True))  # first cut: 4 x 0.6
        await asyncio.sleep(0.05)
        seen.append(await answer(slots, latency_s=0.01, in_flight=2))  # + 1 / 2.4
        await slots.close()
        return seen

    assert asyncio.run(go()) == pytest.approx([2, 3, 4, 2.4, 2.4 + 1 / 2.4])


def test_a_limit_the_calls_do_not_use_does_not_grow(backend: str, url: str | None) -> None:
    async def go() -> tuple[float, float]:
        (slots,) = reporters(backend, url, 1)
        await grow_to(slots, 8)
        before = await slots.adapted(KEY)
        assert before is not None
        after = await answer(slots, latency_s=0.1, in_flight=3)  # 3 of 8: under half
        await slots.close()
        return before, after

    before, after = asyncio.run(go())
    assert after == before == 8


def test_one_congestion_event_cuts_once_whoever_reports_it(backend: str,
                                                           url: str | None) -> None:
    async def go() -> list[float]:
        workers = reporters(backend, url, 4)
        await grow_to(workers[0], 10)
        # Four workers' calls, all sent before the first cut (5 s ago), time out.
        cuts = [await answer(slots, latency_s=5.0, overloaded=True) for slots in workers]
        # A call sent after the cut times out too: the new limit is still too high.
        cuts.append(await answer(workers[3], latency_s=0.0, overloaded=True))
        for slots in set(workers):
            await slots.close()
        return cuts

    assert asyncio.run(go()) == pytest.approx([6, 6, 6, 6, 3.6])


def test_the_limit_stays_between_one_and_its_most(backend: str, url: str | None) -> None:
    async def go() -> tuple[float, float, list[str | None]]:
        (slots,) = reporters(backend, url, 1)
        await grow_to(slots, 5)
        high = await answer(slots, latency_s=0.1, in_flight=5, most=5)
        for _ in range(10):
            low = await answer(slots, latency_s=0.0, overloaded=True, most=5)
        taken = [await slots.take(KEY, limit=5, lease_s=10, adaptive=True) for _ in range(2)]
        await slots.close()
        return high, low, taken

    high, low, taken = asyncio.run(go())
    assert high == 5 and low == 1
    assert taken[0] is not None and taken[1] is None  # a limit of 1 lets one call out


def test_the_floor_is_the_fleet_s(backend: str, url: str | None) -> None:
    async def go() -> list[float]:
        fast, slow = reporters(backend, url, 2)
        seen = [await answer(fast, latency_s=0.1)]  # 1 -> 2, the floor 0.1 s
        # Near the fleet's floor: 3. Then above 1.5 of it (if this worker had a floor of
        # its own, 0.14 s, the answer would be near it): 3 x 0.6.
        seen.append(await answer(slow, latency_s=0.14, in_flight=2))
        seen.append(await answer(slow, latency_s=0.16, in_flight=3))
        for slots in {fast, slow}:
            await slots.close()
        return seen

    assert asyncio.run(go()) == pytest.approx([2, 3, 1.8])


def test_one_slow_answer_among_fast_ones_does_not_cut(backend: str, url: str | None) -> None:
    async def go() -> tuple[list[float], float]:
        (slots,) = reporters(backend, url, 1)
        await grow_to(slots, 10)
        cut = await answer(slots, latency_s=0.0, overloaded=True)  # out of the slow start
        await asyncio.sleep(0.05)
        seen = [await answer(slots, latency_s=0.01, in_flight=6)]  # the floor, averaged
        # Answers at 3 floors: the first weighs 1 / limit and leaves the average near
        # the floor; within a round trip of them it passes 1.5 floors and cuts.
        while len(seen) < 10 and seen[-1] >= seen[0]:
            seen.append(await answer(slots, latency_s=0.03, in_flight=6))
        await slots.close()
        return seen, cut

    seen, cut = asyncio.run(go())
    assert cut == pytest.approx(6)
    assert seen[1] > seen[0] > 6  # one slow answer: still near the floor, the limit grew
    assert 3 <= len(seen) <= 6 and seen[-1] < 6 * 0.7  # a few of them cut it


def test_the_fleet_s_state_expires_when_the_endpoint_is_idle(redis_url: str) -> None:
    async def go() -> None:
        slots = RedisSlots(redis_url)
        await answer(slots, latency_s=0.1)
        await slots.close()

    asyncio.run(go())
    client = redis.Redis.from_url(redis_url)
    ttl_ms = client.pttl(KEY_PREFIX + KEY + LIMIT_SUFFIX)
    client.close()
    assert 0 < ttl_ms <= STATE_LIFE_S * 1000  # type: ignore[operator]


def test_the_pure_limit_matches_its_rule_in_order() -> None:
    aimd = Aimd(max_limit=64)
    for now in (1.0, 2.0, 3.0):
        aimd.observe(0.1, overloaded=False, now_s=now, in_flight=int(aimd.limit))
    assert aimd.limit == 4 and aimd.floor_s == 0.1
    aimd.observe(0.5, overloaded=True, now_s=4.0, in_flight=4)
    aimd.observe(0.5, overloaded=True, now_s=4.1, in_flight=4)  # sent before the cut
    assert aimd.limit == pytest.approx(2.4) and not aimd.slow_start
