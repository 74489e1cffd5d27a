"""Reading metric queues on the broker, one probe per broker kind.

    QueueProbe              base.py: the interface, and the reading it returns
    ├── RedisQueueProbe     redis.py: lists, the ``unacked`` hash, jobs per message
    ├── AmqpQueueProbe      amqp.py: RabbitMQ, ready messages by passive declare
    ├── FilesystemQueueProbe filesystem.py: the embedded broker, message files in its folder
    └── UnknownQueueProbe   base.py: any other broker
"""

from __future__ import annotations

from urllib.parse import urlsplit

from evalfleet.broker.probe.amqp import AmqpQueueProbe
from evalfleet.broker.probe.base import QueueProbe, QueueReading, UnknownQueueProbe
from evalfleet.broker.probe.envelope import EnvelopeSummary, summarize_envelope
from evalfleet.broker.probe.filesystem import FilesystemQueueProbe
from evalfleet.broker.probe.redis import RedisQueueProbe
from evalfleet.broker.queues import embedded_broker_folder
from evalfleet.core.settings import Settings

__all__ = [
    "AmqpQueueProbe",
    "EnvelopeSummary",
    "FilesystemQueueProbe",
    "QueueProbe",
    "QueueReading",
    "RedisQueueProbe",
    "UnknownQueueProbe",
    "open_queue_probe",
    "summarize_envelope",
]

#: URL schemes of each broker kind.
_REDIS_SCHEMES = ("redis", "rediss", "unix")
_AMQP_SCHEMES = ("amqp", "amqps", "pyamqp")


def open_queue_probe(settings: Settings) -> QueueProbe:
    """The probe for the configured broker; brokers it cannot read get an unknown probe."""
    url = settings.resolved_broker_url()
    scheme = urlsplit(url).scheme.split("+")[0]
    if scheme in _REDIS_SCHEMES:
        return RedisQueueProbe.from_url(url)
    if scheme in _AMQP_SCHEMES:
        return AmqpQueueProbe(url)
    if settings.embedded_broker:
        return FilesystemQueueProbe(embedded_broker_folder(settings) / "queue")
    return UnknownQueueProbe(f"queue depth is not read from {scheme}:// brokers")
