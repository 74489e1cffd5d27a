"""Queue depth on a Redis broker: the length of the queue's lists."""

from __future__ import annotations

import logging

import redis

from evalfleet.broker.depth.base import QueueDepth

logger = logging.getLogger(__name__)

#: kombu's separator between a queue name and its priority (``eval.rag_qa\x06\x163``).
_PRIORITY_SEPARATOR = "\x06\x16"

#: kombu's default priority steps; priority 0 is the queue's own key.
_PRIORITY_STEPS = (0, 3, 6, 9)


class RedisQueueDepth(QueueDepth):
    """LLEN of ``eval.<metric>`` and its priority lists, in one round trip."""

    def __init__(self, client: redis.Redis) -> None:
        """Use ``client`` (connected to the broker's database)."""
        self._client = client

    def depth(self, queue: str) -> int | None:
        """Jobs waiting in ``queue``; None when Redis cannot be reached."""
        try:
            with self._client.pipeline(transaction=False) as pipe:
                for priority in _PRIORITY_STEPS:
                    pipe.llen(queue if priority == 0
                              else f"{queue}{_PRIORITY_SEPARATOR}{priority}")
                return sum(int(n) for n in pipe.execute())
        except redis.RedisError as exc:
            logger.debug("queue depth of %s unknown: %s", queue, exc)
            return None
