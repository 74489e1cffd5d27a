"""Queue depth on Redis: LLEN of the queue and its priority lists."""

from __future__ import annotations

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from evalfleet.broker.depth import RedisQueueDepth


def test_counts_the_queue_and_its_priority_lists(redis_client: redis.Redis) -> None:
    redis_client.rpush("eval.rag_qa", *range(7))
    redis_client.rpush("eval.rag_qa\x06\x163", *range(2))
    redis_client.rpush("eval.other", 1)
    probe = RedisQueueDepth(redis_client)
    assert probe.depth("eval.rag_qa") == 9
    assert probe.depth("eval.empty") == 0


def test_unreachable_is_unknown() -> None:
    client = redis.Redis(port=1, retry=Retry(NoBackoff(), 0))
    assert RedisQueueDepth(client).depth("eval.rag_qa") is None
