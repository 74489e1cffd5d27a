"""The fleet-wide cap on judge calls in flight: leases in real Redis, the simulator over HTTP."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from evalfleet.core.errors import JudgeDeferred
from evalfleet.core.settings import Settings
from evalfleet.judgesim import RunningSim
from tests.workers.judge.test_fleet import request
from workers.judge import AsyncHttpJudge, JudgeFleet, JudgeReply
from workers.judge.gate import InFlight, InFlightCap
from workers.limiter.adaptive import Aimd
from workers.limiter.slots import LocalSlots, RedisSlots


def fleet(sim: RunningSim, slots: RedisSlots | LocalSlots, *, limit: int, concurrency: int,
          max_wait_s: float = 30.0) -> JudgeFleet:
    """One worker's judge, capped with the fleet at ``limit`` calls in flight."""
    return JudgeFleet(AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=10,
                                     max_connections=concurrency),
                      concurrency=concurrency,
                      cap=InFlightCap(slots=slots, limit_for=lambda model: limit, lease_s=15,
                                      max_wait_s=max_wait_s))


@pytest.mark.parametrize("workers", [2, 4])
def test_the_fleet_never_has_more_calls_in_flight_than_its_cap(
    workers: int, sim: RunningSim, redis_url: str,
) -> None:
    # A server with 4 slots; each worker would send 16 at once without the cap.
    sim.configure(latency_ms=50)
    fleets = [fleet(sim, RedisSlots(redis_url), limit=4, concurrency=16)
              for _ in range(workers)]
    started = time.monotonic()
    try:
        with ThreadPoolExecutor(workers) as pool:
            answers = [answer for batch in pool.map(
                lambda judge: judge.complete_many([request(n) for n in range(16)]), fleets)
                for answer in batch]
    finally:
        for judge in fleets:
            judge.close()
    elapsed_s = time.monotonic() - started
    assert len(answers) == 16 * workers
    assert all(isinstance(answer, JudgeReply) for answer in answers)
    stats = sim.stats()
    # Never above the cap (margin 0: a slot is taken before the request is sent and given
    # back after its answer), and no call timed out or was made twice.
    assert stats["max_in_flight"] <= 4 and stats["requests"] == 16 * workers
    # The server's 4 slots stayed busy: 16 x workers calls of 50 ms, 4 at a time, within
    # four times the ideal (a loaded 2-core machine adds each look for a slot).
    assert elapsed_s < 4 * (16 * workers / 4) * 0.05 + 2.0


def test_a_call_that_finds_no_slot_in_time_is_deferred_unsent(sim: RunningSim,
                                                              redis_url: str) -> None:
    sim.configure(latency_ms=1000)
    judge = fleet(sim, RedisSlots(redis_url), limit=1, concurrency=4, max_wait_s=0.2)
    try:
        answers = judge.complete_many([request(0), request(1)])
    finally:
        judge.close()
    assert sorted(type(answer).__name__ for answer in answers) == ["JudgeDeferred", "JudgeReply"]
    deferred = next(answer for answer in answers if isinstance(answer, JudgeDeferred))
    assert "no free judge slot" in str(deferred) and deferred.retry_after_s == 0.2
    assert sim.stats()["requests"] == 1


#: A "worker" that takes three slots of a 3-slot key with a 1 s lease, says so, and hangs.
_HOLDER = """
import asyncio, sys
from workers.limiter.slots import RedisSlots
async def main():
    slots = RedisSlots(sys.argv[1])
    for _ in range(3):
        assert await slots.take("judge|m", limit=3, lease_s=1.0)
    print("held", flush=True)
    await asyncio.sleep(3600)
asyncio.run(main())
"""


def test_a_killed_worker_gives_its_slots_back_within_the_lease(redis_url: str) -> None:
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, redis_url],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        holder.kill()
        holder.wait(10)
        killed_at = time.monotonic()
    finally:
        holder.kill()

    async def first_free_slot() -> float:
        slots = RedisSlots(redis_url)
        try:
            while await slots.take("judge|m", limit=3, lease_s=1.0) is None:
                await asyncio.sleep(0.02)
            return time.monotonic() - killed_at
        finally:
            await slots.close()

    waited_s = asyncio.run(first_free_slot())
    assert waited_s <= 1.0 + 0.5  # the lease, plus a look


def test_slots_are_per_endpoint_and_model_and_leases_expire(redis_url: str) -> None:
    async def go() -> tuple[list[str | None], int, int]:
        slots = RedisSlots(redis_url)
        try:
            taken = [await slots.take("a|m", limit=2, lease_s=0.3) for _ in range(3)]
            other = await slots.take("a|n", limit=2, lease_s=0.3)
            assert other is not None
            held = await slots.held("a|m")
            await asyncio.sleep(0.35)
            return taken, held, await slots.held("a|m")
        finally:
            await slots.close()

    taken, held, after = asyncio.run(go())
    assert taken[2] is None and None not in taken[:2]
    assert (held, after) == (2, 0)


def test_the_start_up_check_counts_the_wait_for_a_slot() -> None:
    fits = {"judge_timeout_s": 60, "visibility_timeout_s": 900, "claim_lease_s": 130,
            "liveness_stall_s": 600}
    Settings(**fits)  # two calls of 60 s fit in 130 s...
    with pytest.raises(ValueError, match=r"claim_lease_s \(130\) must exceed two judge calls"):
        Settings(**fits, judge_max_in_flight=4, slot_max_wait_s=10)  # ...not with 2 x 10 s waits


def test_without_shared_redis_the_cap_holds_in_the_process(sim: RunningSim) -> None:
    sim.configure(latency_ms=50)
    judge = fleet(sim, LocalSlots(), limit=2, concurrency=8)
    try:
        answers = judge.complete_many([request(n) for n in range(8)])
    finally:
        judge.close()
    assert all(isinstance(answer, JudgeReply) for answer in answers)
    assert sim.stats()["max_in_flight"] <= 2


def _served(limit: int, *, slots: int, service_s: float) -> float:
    """The latency a server with ``slots`` slots shows at ``limit`` calls in flight."""
    return service_s * max(1.0, limit / slots)


def test_the_adaptive_limit_settles_near_what_the_server_serves() -> None:
    aimd, now = Aimd(max_limit=256), 0.0
    seen: list[int] = []
    for _ in range(3000):
        now += 0.01
        aimd.observe(_served(aimd.current, slots=8, service_s=0.1), overloaded=False, now_s=now)
        seen.append(aimd.current)
    assert min(seen[-500:]) >= 8 and max(seen[-500:]) <= 13  # keeps the slots busy, no flood


def test_the_adaptive_limit_backs_off_on_timeouts_once_per_round_trip() -> None:
    aimd = Aimd(max_limit=64, limit=40.0)
    aimd.observe(0.1, overloaded=False, now_s=0.0)  # slow start: 41
    for n in range(10):  # a burst of timeouts within one round trip counts once
        aimd.observe(1.0, overloaded=True, now_s=0.01 + n * 0.001)
    assert aimd.current == 36  # 41 x 0.9
    aimd.observe(1.0, overloaded=True, now_s=1.0)
    assert aimd.current == 33


def test_an_adaptive_fleet_finds_the_server_s_slots_without_timeouts(sim: RunningSim) -> None:
    sim.configure(latency_ms=50, serve_at_once=4)
    judge = JudgeFleet(AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=10,
                                      max_connections=64),
                       concurrency=64, cap=InFlightCap(slots=LocalSlots(), max_wait_s=30,
                                                       adaptive_max=64))
    try:
        answers = judge.complete_many([request(n) for n in range(96)])
        layer = next(layer for layer in judge.layers if isinstance(layer, InFlight))
        (limit,) = [aimd.current for aimd in layer.adaptive.values()]
    finally:
        judge.close()
    assert all(isinstance(answer, JudgeReply) for answer in answers)
    assert 3 <= limit <= 12 and sim.stats()["max_in_flight"] <= 16  # not 64
