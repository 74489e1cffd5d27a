"""Redis deduplication: shared, expiring, and a clear error when Redis is away."""

from __future__ import annotations

import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from evalfleet.core.errors import BrokerUnavailable
from producers.dedupe import RedisDeduper
from producers.dedupe.redis import KEY_PREFIX, MARK_CHUNK


def test_shared_between_producers_and_expiring(redis_client: redis.Redis) -> None:
    first = RedisDeduper(redis_client, window_s=0.3)
    second = RedisDeduper(redis_client, window_s=0.3)
    first.mark(["rag_qa:x"])
    assert second.seen(["rag_qa:x", "rag_qa:y"]) == [True, False]
    assert 0 < redis_client.pttl(KEY_PREFIX + "rag_qa:x") <= 300
    time.sleep(0.35)
    assert second.seen(["rag_qa:x"]) == [False]


def test_a_batch_over_one_script_call_is_marked_whole(redis_client: redis.Redis) -> None:
    deduper = RedisDeduper(redis_client, window_s=60)
    keys = [f"rag_qa:s-{n}" for n in range(2 * MARK_CHUNK + 7)]
    keys += ["rag_qa:spaces and\nnewline", "rag_qa:ünïcödé 🚉", "rag_qa:" + "x" * 256]
    deduper.mark(keys)
    assert deduper.seen([*keys, "rag_qa:never"]) == [True] * len(keys) + [False]
    assert all(0 < ttl <= 60_000 for ttl in (redis_client.pttl(KEY_PREFIX + key)
                                             for key in keys))
    redis_client.delete(*(KEY_PREFIX + key for key in keys))


def test_unreachable_is_broker_unavailable() -> None:
    deduper = RedisDeduper(redis.Redis(port=1, retry=Retry(NoBackoff(), 0)), window_s=60)
    with pytest.raises(BrokerUnavailable, match="deduplication store unreachable"):
        deduper.seen(["a"])
    with pytest.raises(BrokerUnavailable):
        deduper.mark(["a"])
