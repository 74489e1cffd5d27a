"""Fleet-wide rate limits in Redis: one Lua script reserves requests and tokens atomically.

Every worker of every host draws on the same two numbers per judge endpoint and
model (see :mod:`workers.limiter.gcra`), read and written in one script with
Redis's own clock, so hosts with skewed clocks still share one pace.

Its connections come from a blocking pool: a call that finds every connection busy
waits for one instead of failing. With the client's default pool (100, then "Too many
connections"), 128 calls reserving at once at start-up failed, went unpaced, and took
the fleet's first 10 s to 123% of its limit. A script takes well under a millisecond,
so a few connections serve hundreds of calls in flight.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from evalfleet.core.ratelimit import RateLimit
from workers.limiter.base import RateLimiter, Reservation
from workers.limiter.gcra import BURST_S, interval_for

#: Most connections one process holds to the limiter's Redis.
MAX_CONNECTIONS = 32

#: Seconds a call waits for a free connection before the limiter counts as unavailable.
POOL_WAIT_S = 10.0

#: Prefix of every limiter key.
KEY_PREFIX = "evalfleet:limit:"


def open_limiter_redis(url: str, *, max_connections: int) -> Any:
    """An asyncio Redis client over a blocking pool: past ``max_connections`` a call
    waits up to :data:`POOL_WAIT_S` for a connection instead of failing (an exhausted
    pool is a wait, never an outage).

    Args:
        url: The Redis URL.
        max_connections: Connections this process may open.

    Returns:
        The client; it connects on first use.
    """
    pool = aioredis.BlockingConnectionPool.from_url(
        url, max_connections=max_connections, timeout=POOL_WAIT_S)
    return aioredis.Redis(connection_pool=pool)

# KEYS: rpm key, tpm key. ARGV: rpm interval us, tpm interval us per token, tokens,
# burst us, max wait us. Returns {granted 0/1, wait us}. TATs are microseconds of
# Redis time; an idle limit's keys expire a minute after its TAT has passed.
_NOW_AND_STORE = """
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000000 + tonumber(now_parts[2])
local function store(key, tat)
  local ttl_ms = math.ceil((tat - now) / 1000) + 60000
  redis.call('SET', key, string.format('%.0f', tat), 'PX', ttl_ms)
end
"""

_RESERVE = _NOW_AND_STORE + """
local burst, max_wait = tonumber(ARGV[4]), tonumber(ARGV[5])
local function plan(key, interval, cost)
  if interval <= 0 then return nil, 0 end
  local tat = tonumber(redis.call('GET', key) or now)
  if tat < now then tat = now end
  local wait = tat - burst - now
  if wait < 0 then wait = 0 end
  return tat + interval * cost, wait
end
local rpm_tat, rpm_wait = plan(KEYS[1], tonumber(ARGV[1]), 1)
local tpm_tat, tpm_wait = plan(KEYS[2], tonumber(ARGV[2]), tonumber(ARGV[3]))
local wait = math.max(rpm_wait, tpm_wait)
if wait > max_wait then return {0, wait} end
if rpm_tat then store(KEYS[1], rpm_tat) end
if tpm_tat then store(KEYS[2], tpm_tat) end
return {1, wait}
"""

# KEYS: tpm key. ARGV: tokens (negative: give back), tpm interval us per token.
_CORRECT = _NOW_AND_STORE + """
local tat = redis.call('GET', KEYS[1])
if not tat then return 0 end
local new_tat = tonumber(tat) + tonumber(ARGV[1]) * tonumber(ARGV[2])
if new_tat < now then new_tat = now end
store(KEYS[1], new_tat)
return 1
"""


class RedisRateLimiter(RateLimiter):
    """GCRA budgets shared by every worker through one Redis."""

    def __init__(self, url: str, *, max_connections: int = MAX_CONNECTIONS) -> None:
        """Connect lazily to the Redis at ``url``.

        Args:
            url: The Redis URL.
            max_connections: Connections this process may open; more calls wait.
        """
        self._redis: Any = open_limiter_redis(url, max_connections=max_connections)
        self._reserve = self._redis.register_script(_RESERVE)
        self._correct = self._redis.register_script(_CORRECT)

    async def reserve(self, key: str, *, budget: RateLimit, tokens: int,
                      max_wait_s: float) -> Reservation:
        """See :meth:`RateLimiter.reserve`."""
        granted, wait_us = await self._reserve(
            keys=[f"{KEY_PREFIX}{key}:rpm", f"{KEY_PREFIX}{key}:tpm"],
            args=[_us(interval_for(budget.requests_per_minute)),
                  _us(interval_for(budget.tokens_per_minute)), tokens, _us(BURST_S),
                  _us(max_wait_s)])
        return Reservation(granted=bool(granted), wait_s=int(wait_us) / 1e6)

    async def correct(self, key: str, *, budget: RateLimit, tokens: int) -> None:
        """See :meth:`RateLimiter.correct`."""
        interval = interval_for(budget.tokens_per_minute)
        if interval and tokens:
            await self._correct(keys=[f"{KEY_PREFIX}{key}:tpm"], args=[tokens, _us(interval)])

    async def close(self) -> None:
        """See :meth:`RateLimiter.close`."""
        await self._redis.aclose()


def _us(seconds: float) -> int:
    return round(seconds * 1e6)
