"""Deduplication shared by every producer through Redis: one expiring key per job."""

from __future__ import annotations

from collections.abc import Sequence

import redis

from evalfleet.core.errors import BrokerUnavailable
from producers.dedupe.base import Deduper

#: Prefix of the keys that mark a job as published.
KEY_PREFIX = "evalfleet:dedupe:"


class RedisDeduper(Deduper):
    """``MGET`` to check a batch, ``SET ... PX window`` to mark it: one round trip each."""

    def __init__(self, client: redis.Redis, *, window_s: float) -> None:
        """Use ``client`` (the broker's Redis) and remember keys for ``window_s``."""
        self._client = client
        self._window_ms = max(1, int(window_s * 1000))

    def seen(self, keys: Sequence[str]) -> list[bool]:
        """See :meth:`Deduper.seen`.

        Raises:
            BrokerUnavailable: When Redis cannot be reached.
        """
        if not keys:
            return []
        try:
            values = self._client.mget([KEY_PREFIX + key for key in keys])
        except redis.RedisError as exc:
            raise BrokerUnavailable(f"deduplication store unreachable: {exc}") from exc
        return [value is not None for value in values]

    def mark(self, keys: Sequence[str]) -> None:
        """See :meth:`Deduper.mark`.

        Raises:
            BrokerUnavailable: When Redis cannot be reached.
        """
        if not keys:
            return
        try:
            with self._client.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.set(KEY_PREFIX + key, b"1", px=self._window_ms)
                pipe.execute()
        except redis.RedisError as exc:
            raise BrokerUnavailable(f"deduplication store unreachable: {exc}") from exc
