"""Every deduplication backend, for the tests of their shared contract."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from producers.dedupe import Deduper, MemoryDeduper, RedisDeduper


@pytest.fixture(params=["memory", "redis"])
def deduper(request: pytest.FixtureRequest, redis_url: str) -> Iterator[Deduper]:
    """A deduper with a one-hour window, in memory or in the test's Redis database."""
    if request.param == "memory":
        yield MemoryDeduper(window_s=3600, max_keys=1000)
        return
    client = redis.Redis.from_url(redis_url)
    yield RedisDeduper(client, window_s=3600)
    client.close()
