"""Fleet-wide caps on judge calls in flight per endpoint and model, held as leases.

A self-hosted judge serves a few calls at once (llama.cpp slots, one or two GPUs); the
rest queue inside it until they time out and are retried, a storm that makes things
worse. A cap of calls in flight for the whole fleet keeps them out of the server.

:class:`RedisSlots` keeps each key's slots in one Redis sorted set: a member per call in
flight, scored by the moment its lease ends (Redis's own clock, so hosts with skewed
clocks agree). Taking a slot first drops the expired leases, so the slots of a worker
killed mid-call come back within a lease (the longest a call can take: the judge
timeout plus a margin), with no one to release them. :class:`LocalSlots` is the same
cap for one process (no shared Redis).

An adaptive cap (:mod:`workers.limiter.adaptive`) is one value per key for the whole
fleet, held in a Redis hash beside the slots: taking a slot reads it, and giving a slot
back reports the call's latency and moves it, in the same script and round trip, so
adapting costs no extra call to Redis. Every worker's answers move the one value, with
Redis's clock for the times (a cut once per congestion event, whoever saw it), and the
floor is the fleet's too: the fastest answer any worker saw lately, so a worker that
joins judges against what the fleet learnt. Nothing in the hash belongs to a worker, so
a killed one leaves nothing stuck; an endpoint idle for :data:`STATE_LIFE_S` starts
again from a slow start.
"""

from __future__ import annotations

import itertools
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from workers.limiter.adaptive import (
    BACKOFF,
    START_LIMIT,
    TOLERANCE,
    USED_SHARE,
    WINDOW_FLOORS,
    Aimd,
)
from workers.limiter.redis import MAX_CONNECTIONS, open_limiter_redis

#: Prefix of every slot key.
KEY_PREFIX = "evalfleet:slots:"

#: Suffix of the key of an adaptive limit's state (beside its slots).
LIMIT_SUFFIX = ":limit"

#: Seconds an adaptive limit's state outlives its last report.
STATE_LIFE_S = 600

_NOW_MS = """
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000 + tonumber(now_parts[2]) / 1000
"""

# KEYS: the key's sorted set, its adaptive state. ARGV: limit (an adaptive one's most),
# lease ms, member, adaptive 0/1, start limit, slots held outside the store. Returns 1
# when taken.
_TAKE = _NOW_MS + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local limit = tonumber(ARGV[1])
if ARGV[4] == '1' then
  local adapted = tonumber(redis.call('HGET', KEYS[2], 'limit') or ARGV[5])
  limit = math.max(1, math.min(limit, math.floor(adapted)))
end
if redis.call('ZCARD', KEYS[1]) + tonumber(ARGV[6]) >= limit then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) + 1000)
return 1
"""

# KEYS: the key's sorted set, its adaptive state. ARGV: member, latency ms ('' reports
# nothing), overloaded 0/1, most limit, backoff, tolerance, window floors, used share,
# state life ms, start limit. Returns the limit after the report (or nil). The
# arithmetic is workers/limiter/adaptive.py's Aimd.observe, with -1 for "none".
_GIVE_BACK = _NOW_MS + """
local in_flight = redis.call('ZCOUNT', KEYS[1], now, '+inf')
redis.call('ZREM', KEYS[1], ARGV[1])
if ARGV[2] == '' then return false end
local latency, overloaded = tonumber(ARGV[2]), ARGV[3] == '1'
local most, backoff, tolerance = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local s = redis.call('HMGET', KEYS[2], 'limit', 'slow', 'cut', 'wmin', 'lmin', 'wstart', 'avg')
local limit = tonumber(s[1]) or tonumber(ARGV[10])
local slow, cut = s[2] ~= '0', tonumber(s[3]) or -1
local wmin, lmin, wstart = tonumber(s[4]) or -1, tonumber(s[5]) or -1, tonumber(s[6]) or now
local avg = tonumber(s[7]) or -1
local function lowest(a, b)
  if a < 0 then return b elseif b < 0 then return a else return math.min(a, b) end
end
if not overloaded then wmin = lowest(wmin, latency) end
local floor = lowest(wmin, lmin)
if floor < 0 then floor = latency end
if now - wstart >= tonumber(ARGV[7]) * floor then
  lmin, wmin, wstart = wmin, -1, now
end
if now - latency > cut then
  if not overloaded then
    local weight = 1 / math.max(limit, 1)
    if slow or avg < 0 then weight = 1 end
    if avg < 0 then avg = latency else avg = avg + weight * (latency - avg) end
  end
  if overloaded or avg > tolerance * floor then
    limit, cut, slow, avg = math.max(1, limit * backoff), now, false, -1
  elseif in_flight >= tonumber(ARGV[8]) * limit then
    if slow then limit = limit + 1 else limit = limit + 1 / math.max(limit, 1) end
  end
end
limit = math.min(most, limit)
redis.call('HSET', KEYS[2], 'limit', limit, 'slow', slow and '1' or '0', 'cut', cut,
           'wmin', wmin, 'lmin', lmin, 'wstart', wstart, 'avg', avg)
redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[9]))
return tostring(limit)
"""


@dataclass(frozen=True, slots=True)
class Report:
    """What a call tells an adaptive limit when it gives its slot back."""

    latency_s: float
    """Its time at the judge."""
    overloaded: bool
    """It timed out or was refused for load (429, 503)."""


class Slots(ABC):
    """Slots for calls in flight, per key (an endpoint and a model)."""

    @abstractmethod
    async def take(self, key: str, *, limit: int, lease_s: float, adaptive: bool = False,
                   held_elsewhere: int = 0) -> str | None:
        """Take a slot if fewer than the limit are held.

        Args:
            key: The endpoint and model.
            limit: Slots the key has in all; when ``adaptive``, the most the key's
                adaptive limit may reach.
            lease_s: When the slot returns by itself if never given back.
            adaptive: The key's limit adapts to the latency reported on giving slots back.
            held_elsewhere: Slots of the key held outside this store (a process's own,
                taken while the store was out of reach), counted against the limit.

        Returns:
            The slot's token, to give back with :meth:`give_back`; None when all are held.
        """

    @abstractmethod
    async def give_back(self, key: str, token: str, *, limit: int = 0,
                        report: Report | None = None) -> None:
        """Return a slot taken with :meth:`take`.

        Args:
            key: The endpoint and model.
            token: The slot's token.
            limit: With a report, the most the key's adaptive limit may reach.
            report: How the call went, for an adaptive limit (none: nothing learnt).
        """

    @abstractmethod
    async def held(self, key: str) -> int:
        """Slots of ``key`` held now (leases not yet expired)."""

    @abstractmethod
    async def adapted(self, key: str) -> float | None:
        """The adaptive limit of ``key`` now (None: none learnt yet)."""

    async def close(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Release connections."""


class LocalSlots(Slots):
    """Slots for one process (no lease needed: the process holds them all)."""

    def __init__(self) -> None:
        self._held: dict[str, set[str]] = {}
        self._limits: dict[str, Aimd] = {}
        self._tokens = itertools.count()

    async def take(self, key: str, *, limit: int, lease_s: float, adaptive: bool = False,
                   held_elsewhere: int = 0) -> str | None:
        """See :meth:`Slots.take`."""
        held = self._held.setdefault(key, set())
        if adaptive:
            limit = self._aimd(key, limit).current
        if len(held) + held_elsewhere >= limit:
            return None
        token = str(next(self._tokens))
        held.add(token)
        return token

    async def give_back(self, key: str, token: str, *, limit: int = 0,
                        report: Report | None = None) -> None:
        """See :meth:`Slots.give_back`."""
        held = self._held.get(key, set())
        in_flight = len(held)
        held.discard(token)
        if report is not None:
            self._aimd(key, limit).observe(report.latency_s, overloaded=report.overloaded,
                                           now_s=time.monotonic(), in_flight=in_flight)

    async def held(self, key: str) -> int:
        """See :meth:`Slots.held`."""
        return len(self._held.get(key, ()))

    async def adapted(self, key: str) -> float | None:
        """See :meth:`Slots.adapted`."""
        aimd = self._limits.get(key)
        return aimd.limit if aimd is not None else None

    def _aimd(self, key: str, most: int) -> Aimd:
        aimd = self._limits.setdefault(key, Aimd(max_limit=most))
        aimd.max_limit = most
        return aimd


class RedisSlots(Slots):
    """Slots shared by every worker through one Redis, as leases."""

    def __init__(self, url: str, *, max_connections: int = MAX_CONNECTIONS) -> None:
        """Connect lazily to the Redis at ``url``.

        Args:
            url: The Redis URL.
            max_connections: Connections this process may open; more calls wait.
        """
        self._redis: Any = open_limiter_redis(url, max_connections=max_connections)
        self._take = self._redis.register_script(_TAKE)
        self._give_back = self._redis.register_script(_GIVE_BACK)
        self._prefix = uuid.uuid4().hex
        self._tokens = itertools.count()

    async def take(self, key: str, *, limit: int, lease_s: float, adaptive: bool = False,
                   held_elsewhere: int = 0) -> str | None:
        """See :meth:`Slots.take`."""
        token = f"{self._prefix}:{next(self._tokens)}"
        taken = await self._take(keys=_keys(key), args=[limit, round(lease_s * 1000), token,
                                                        int(adaptive), START_LIMIT,
                                                        held_elsewhere])
        return token if taken else None

    async def give_back(self, key: str, token: str, *, limit: int = 0,
                        report: Report | None = None) -> None:
        """See :meth:`Slots.give_back`."""
        if report is None:
            await self._redis.zrem(KEY_PREFIX + key, token)
            return
        await self._give_back(keys=_keys(key), args=[
            token, report.latency_s * 1000, int(report.overloaded), limit, BACKOFF,
            TOLERANCE, WINDOW_FLOORS, USED_SHARE, STATE_LIFE_S * 1000, START_LIMIT])

    async def held(self, key: str) -> int:
        """See :meth:`Slots.held`."""
        now_s, now_us = await self._redis.time()
        return int(await self._redis.zcount(KEY_PREFIX + key, now_s * 1000 + now_us // 1000,
                                            "+inf"))

    async def adapted(self, key: str) -> float | None:
        """See :meth:`Slots.adapted`."""
        limit = await self._redis.hget(KEY_PREFIX + key + LIMIT_SUFFIX, "limit")
        return float(limit) if limit is not None else None

    async def close(self) -> None:
        """See :meth:`Slots.close`."""
        await self._redis.aclose()


def _keys(key: str) -> list[str]:
    return [KEY_PREFIX + key, KEY_PREFIX + key + LIMIT_SUFFIX]
