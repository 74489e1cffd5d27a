"""Where kombu's Redis transport keeps a queue's messages, written out once for every
reader (producer backpressure, operator probes, the Prometheus gauge).

- Waiting: one list per queue and priority step, ``eval.rag_qa`` for priority 0 and
  ``eval.rag_qa\\x06\\x163`` and so on for the others. Producers LPUSH, workers pop from
  the right, so the oldest message is the last element.
- In flight: the hash ``unacked`` (delivery tag -> ``[message, exchange, routing key]``)
  for every queue of the database, with delivery times in the sorted set
  ``unacked_index``.
"""

from __future__ import annotations

from collections.abc import Sequence

import redis

#: kombu's separator between a queue name and its priority.
PRIORITY_SEPARATOR = "\x06\x16"

#: kombu's priority steps; priority 0 is the queue's own key.
PRIORITY_STEPS = (0, 3, 6, 9)

#: kombu's hash of delivered, unacknowledged messages, and its index by delivery time.
UNACKED_KEY = "unacked"
UNACKED_INDEX_KEY = "unacked_index"


def priority_keys(queue: str) -> list[str]:
    """The Redis lists holding ``queue``'s messages, one per priority step."""
    return [queue if step == 0 else f"{queue}{PRIORITY_SEPARATOR}{step}"
            for step in PRIORITY_STEPS]


def waiting_messages(client: redis.Redis, queues: Sequence[str]) -> list[int]:
    """Messages waiting in each of ``queues``, every priority counted, in one round trip.

    Raises:
        redis.RedisError: When Redis cannot be read.
    """
    with client.pipeline(transaction=False) as pipe:
        for queue in queues:
            for key in priority_keys(queue):
                pipe.llen(key)
        lengths = iter(pipe.execute())
    return [sum(int(next(lengths)) for _ in PRIORITY_STEPS) for _ in queues]
