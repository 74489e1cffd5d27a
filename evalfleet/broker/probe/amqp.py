"""Metric queues on RabbitMQ (AMQP), read with a passive ``queue.declare``.

A passive declare returns the number of messages ready for delivery without
creating or changing the queue. It says nothing about the jobs inside those
messages (each may carry a batch), about messages delivered and unacknowledged,
or about their age; those stay unknown (the management API would have the
unacknowledged count). A queue that does not exist yet holds nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from kombu import Connection

from evalfleet.broker.errors import BROKER_ERRORS
from evalfleet.broker.probe.base import QueueProbe, QueueReading
from evalfleet.broker.queues import ready_messages

logger = logging.getLogger(__name__)

#: What a passive declare cannot tell.
AMQP_NOTE = "RabbitMQ: ready messages only (jobs per message, unacked and age unknown)"


class AmqpQueueProbe(QueueProbe):
    """Ready messages per queue from passive declares, on one short-lived connection."""

    def __init__(self, url: str, *, timeout_s: float = 5.0,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        """Read the broker at ``url`` (``amqp://user:password@host:port/vhost``)."""
        self._url = url
        self._timeout_s = timeout_s
        self._clock = clock

    def read(self, queues: Sequence[str]) -> dict[str, QueueReading]:
        """See :meth:`QueueProbe.read`."""
        now = self._clock()
        try:
            with Connection(self._url, connect_timeout=self._timeout_s) as connection:
                connection.ensure_connection(max_retries=1)
                return {queue: self._reading(connection, queue, now=now) for queue in queues}
        except BROKER_ERRORS as exc:
            logger.debug("cannot read queues: %s", exc)
            note = f"RabbitMQ cannot be read: {type(exc).__name__}"
            return {queue: QueueReading(queue, read_at=now, note=note) for queue in queues}

    def close(self) -> None:
        """Nothing to release: each read opens and closes its own connection."""

    def _reading(self, connection: Connection, queue: str, *, now: datetime) -> QueueReading:
        return QueueReading(queue, read_at=now, waiting_messages=ready_messages(connection, queue),
                            note=AMQP_NOTE)
