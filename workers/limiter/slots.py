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
"""

from __future__ import annotations

import itertools
import uuid
from abc import ABC, abstractmethod
from typing import Any

from workers.limiter.redis import MAX_CONNECTIONS, open_limiter_redis

#: Prefix of every slot key.
KEY_PREFIX = "evalfleet:slots:"

# KEYS: the key's sorted set. ARGV: limit, lease ms, member. Returns 1 when taken.
_TAKE = """
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000 + math.floor(tonumber(now_parts[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) + 1000)
return 1
"""


class Slots(ABC):
    """Slots for calls in flight, per key (an endpoint and a model)."""

    @abstractmethod
    async def take(self, key: str, *, limit: int, lease_s: float) -> str | None:
        """Take a slot if fewer than ``limit`` are held.

        Args:
            key: The endpoint and model.
            limit: Slots the key has in all.
            lease_s: When the slot returns by itself if never given back.

        Returns:
            The slot's token, to give back with :meth:`give_back`; None when all are held.
        """

    @abstractmethod
    async def give_back(self, key: str, token: str) -> None:
        """Return a slot taken with :meth:`take`."""

    @abstractmethod
    async def held(self, key: str) -> int:
        """Slots of ``key`` held now (leases not yet expired)."""

    async def close(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Release connections."""


class LocalSlots(Slots):
    """Slots for one process (no lease needed: the process holds them all)."""

    def __init__(self) -> None:
        self._held: dict[str, set[str]] = {}
        self._tokens = itertools.count()

    async def take(self, key: str, *, limit: int, lease_s: float) -> str | None:
        """See :meth:`Slots.take`."""
        held = self._held.setdefault(key, set())
        if len(held) >= limit:
            return None
        token = str(next(self._tokens))
        held.add(token)
        return token

    async def give_back(self, key: str, token: str) -> None:
        """See :meth:`Slots.give_back`."""
        self._held.get(key, set()).discard(token)

    async def held(self, key: str) -> int:
        """See :meth:`Slots.held`."""
        return len(self._held.get(key, ()))


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
        self._prefix = uuid.uuid4().hex
        self._tokens = itertools.count()

    async def take(self, key: str, *, limit: int, lease_s: float) -> str | None:
        """See :meth:`Slots.take`."""
        token = f"{self._prefix}:{next(self._tokens)}"
        taken = await self._take(keys=[KEY_PREFIX + key],
                                 args=[limit, round(lease_s * 1000), token])
        return token if taken else None

    async def give_back(self, key: str, token: str) -> None:
        """See :meth:`Slots.give_back`."""
        await self._redis.zrem(KEY_PREFIX + key, token)

    async def held(self, key: str) -> int:
        """See :meth:`Slots.held`."""
        now_s, now_us = await self._redis.time()
        return int(await self._redis.zcount(KEY_PREFIX + key, now_s * 1000 + now_us // 1000,
                                            "+inf"))

    async def close(self) -> None:
        """See :meth:`Slots.close`."""
        await self._redis.aclose()
