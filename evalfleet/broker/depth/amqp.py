"""Queue depth on RabbitMQ: messages ready in the queue, by a passive declare."""

from __future__ import annotations

import logging
import threading

from kombu import Connection

from evalfleet.broker.depth.base import QueueDepth
from evalfleet.broker.errors import BROKER_ERRORS
from evalfleet.broker.queues import ready_messages

logger = logging.getLogger(__name__)


class AmqpQueueDepth(QueueDepth):
    """Ready messages of a metric queue, over one connection kept for the probe.

    Messages delivered to a worker and not yet acknowledged are not counted (a passive
    declare does not tell them); they are at most the workers' prefetch.
    """

    def __init__(self, url: str, *, timeout_s: float = 2.0) -> None:
        """Read the broker at ``url`` (``amqp://user:password@host:port/vhost``)."""
        self._url = url
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._connection: Connection | None = None

    def depth(self, queue: str) -> int | None:
        """Messages ready in ``queue``; None when RabbitMQ cannot be reached."""
        with self._lock:
            try:
                if self._connection is None:
                    self._connection = Connection(self._url, connect_timeout=self._timeout_s)
                    self._connection.ensure_connection(max_retries=1)
                return ready_messages(self._connection, queue)
            except BROKER_ERRORS as exc:
                logger.debug("queue depth of %s unknown: %s", queue, exc)
                self._drop_connection()
                return None

    def close(self) -> None:
        """Close the probe's connection."""
        with self._lock:
            self._drop_connection()

    def _drop_connection(self) -> None:
        if self._connection is not None:
            self._connection.release()
            self._connection = None
