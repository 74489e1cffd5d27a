"""Queue depth on a Redis broker: the length of the queue's lists."""

from __future__ import annotations

import logging

import redis

from evalfleet.broker.depth.base import QueueDepth
from evalfleet.broker.redis_keys import waiting_messages

logger = logging.getLogger(__name__)


class RedisQueueDepth(QueueDepth):
    """Messages in ``eval.<metric>`` and its priority lists, in one round trip."""

    def __init__(self, client: redis.Redis) -> None:
        """Use ``client`` (connected to the broker's database)."""
        self._client = client

    def depth(self, queue: str) -> int | None:
        """Messages waiting in ``queue``; None when Redis cannot be reached."""
        try:
            return waiting_messages(self._client, [queue])[0]
        except redis.RedisError as exc:
            logger.debug("queue depth of %s unknown: %s", queue, exc)
            return None
