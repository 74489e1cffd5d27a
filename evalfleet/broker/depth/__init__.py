"""Queue depth probes, one per broker kind, for backpressure.

    QueueDepth               base.py: the interface
    ├── RedisQueueDepth      redis.py: LLEN of the queue's lists
    ├── AmqpQueueDepth       amqp.py: ready messages, by a passive declare (RabbitMQ)
    ├── FilesystemQueueDepth filesystem.py: message files in the embedded broker's folder
    └── UnknownQueueDepth    base.py: any other broker, no limit applies
"""

from __future__ import annotations

from evalfleet.broker.depth.amqp import AmqpQueueDepth
from evalfleet.broker.depth.base import CachedQueueDepth, QueueDepth, UnknownQueueDepth
from evalfleet.broker.depth.filesystem import FilesystemQueueDepth
from evalfleet.broker.depth.redis import RedisQueueDepth

__all__ = [
    "AmqpQueueDepth",
    "CachedQueueDepth",
    "FilesystemQueueDepth",
    "QueueDepth",
    "RedisQueueDepth",
    "UnknownQueueDepth",
]
