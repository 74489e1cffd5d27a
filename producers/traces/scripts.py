"""Lua scripts on the shared Redis, for the trace and session buffers: each buffer step is
one script, and every Redis error becomes :class:`BrokerUnavailable` naming the buffer."""

from __future__ import annotations

from typing import Any

import redis
from redis.commands.core import Script

from evalfleet.core.errors import BrokerUnavailable


class ScriptRunner:
    """Registers and runs one buffer's scripts on ``client``."""

    def __init__(self, client: redis.Redis, *, what: str) -> None:
        """Run on ``client``; ``what`` names the buffer in errors (``trace buffer``)."""
        self._client = client
        self._what = what

    def register(self, source: str) -> Script:
        """The script ``source``, sent by its digest once Redis holds it."""
        return self._client.register_script(source)

    def run(self, script: Script, args: list[Any]) -> Any:
        """The script's reply.

        Raises:
            BrokerUnavailable: When Redis cannot be reached.
        """
        try:
            return script(keys=[], args=args)
        except redis.RedisError as exc:
            raise BrokerUnavailable(f"{self._what} unreachable: {exc}") from exc

    def count(self, key: str) -> int:
        """Members of the sorted set ``key``.

        Raises:
            BrokerUnavailable: When Redis cannot be reached.
        """
        try:
            return int(self._client.zcard(key))
        except redis.RedisError as exc:
            raise BrokerUnavailable(f"{self._what} unreachable: {exc}") from exc

    def lowest_score(self, key: str) -> float | None:
        """The lowest score in the sorted set ``key``; None when it is empty.

        Raises:
            BrokerUnavailable: When Redis cannot be reached.
        """
        try:
            lowest = self._client.zrange(key, 0, 0, withscores=True)
        except redis.RedisError as exc:
            raise BrokerUnavailable(f"{self._what} unreachable: {exc}") from exc
        return float(lowest[0][1]) if lowest else None
