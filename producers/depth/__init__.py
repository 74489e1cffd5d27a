"""Queue depth probes, one per broker kind, for backpressure.

    QueueDepth               base.py: the interface
    ├── RedisQueueDepth      redis.py: LLEN of the queue's lists
    ├── AmqpQueueDepth       amqp.py: ready messages, by a passive declare (RabbitMQ)
    ├── FilesystemQueueDepth filesystem.py: message files in the embedded broker's folder
    └── UnknownQueueDepth    base.py: any other broker, no limit applies
"""

from __future__ import annotations

from producers.depth.amqp import AmqpQueueDepth
from producers.depth.base import CachedQueueDepth, QueueDepth, UnknownQueueDepth
from producers.depth.filesystem import FilesystemQueueDepth
from producers.depth.redis import RedisQueueDepth

__all__ = [
    "AmqpQueueDepth",
    "CachedQueueDepth",
    "FilesystemQueueDepth",
    "QueueDepth",
    "RedisQueueDepth",
    "UnknownQueueDepth",
]
