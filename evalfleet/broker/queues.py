"""Broker connection settings and queue declarations shared by producers and workers.

Both sides must agree on the transport options (the embedded file-system
broker's folders above all) and, on RabbitMQ, on every argument of every queue
(a queue declared twice with different arguments is a channel error), so both
are built here, from the settings, once.

The broker is chosen by URL: ``redis://`` (the default for fleets), ``amqp://``
(RabbitMQ), or none (the embedded file-system broker). On RabbitMQ each metric
queue is a durable quorum queue bound to the topic exchange ``eval``, whose
rejected or too often redelivered messages go to the ``eval.dead`` queue, and
publishers wait for the broker's confirm.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kombu import Connection, Exchange, Queue
from kombu.transport.native_delayed_delivery import (
    bind_queue_to_native_delayed_delivery_exchange,
    declare_native_delayed_delivery_exchanges_and_queues,
)

from evalfleet.core.settings import REDIS_SCHEMES, Settings

logger = logging.getLogger(__name__)

#: Redis connections kept beyond the worker's concurrency (consumer, acks, publishes).
#: Too few and late acks under the threads pool starve the pool (Celery issue #1350).
REDIS_SPARE_CONNECTIONS = 32

#: Embedded file-system broker: seconds between two looks at an empty queue folder.
#: kombu's default, 1 s, takes one message per queue per second, which paced the demo's
#: worker at two batches a second; a look is one directory listing.
FILESYSTEM_POLL_S = 0.1

#: RabbitMQ: the exchange every metric queue is bound to. A topic exchange, because
#: Celery's native delayed delivery (countdowns on quorum queues) cannot route through
#: a direct one.
EVAL_EXCHANGE = "eval"

#: RabbitMQ: where a metric queue sends the messages it dead-letters (rejected without
#: requeue, or delivered more than :data:`DELIVERY_LIMIT` times), and the queue that
#: keeps them.
DEAD_LETTER_EXCHANGE = "eval.dead"
DEAD_LETTER_QUEUE = "eval.dead"

#: RabbitMQ: deliveries of one message before its queue dead-letters it. Each worker
#: crash or requeue counts one; a message that keeps killing workers stops there.
DELIVERY_LIMIT = 20

_AMQP_SCHEMES = ("amqp://", "amqps://", "pyamqp://")


def broker_transport_options(settings: Settings, *, concurrency: int) -> dict[str, Any]:
    """kombu transport options for the configured broker.

    Args:
        settings: The settings.
        concurrency: Jobs in flight in this process (1 for a producer).

    Returns:
        The ``broker_transport_options`` for Celery.
    """
    if is_redis(settings):
        return {
            "visibility_timeout": settings.broker.visibility_timeout_s,
            "max_connections": concurrency + REDIS_SPARE_CONNECTIONS,
        }
    if is_amqp(settings):
        # A publish counts only once RabbitMQ confirmed it: a producer never reports a
        # job accepted, nor a worker acknowledges a retried job, that the broker dropped.
        return {"confirm_publish": True}
    if settings.embedded_broker:
        folder = embedded_broker_folder(settings)
        for sub in ("queue", "control", "processed"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        return {
            "data_folder_in": str(folder / "queue"),
            "data_folder_out": str(folder / "queue"),
            "control_folder": str(folder / "control"),
            "processed_folder": str(folder / "processed"),
            "polling_interval": FILESYSTEM_POLL_S,
        }
    return {}


def embedded_broker_folder(settings: Settings) -> Path:
    """Where the file-system broker keeps its messages."""
    return (settings.store.data_dir / "broker").resolve()


def is_redis(settings: Settings) -> bool:
    """True when the broker is Redis."""
    return settings.resolved_broker_url().startswith(REDIS_SCHEMES)


def is_amqp(settings: Settings) -> bool:
    """True when the broker is RabbitMQ (``amqp://``, ``amqps://``, ``pyamqp://``)."""
    return is_amqp_url(settings.resolved_broker_url())


def is_amqp_url(url: str) -> bool:
    """True when ``url`` is a RabbitMQ broker URL."""
    return url.startswith(_AMQP_SCHEMES)


def eval_queue(settings: Settings, name: str) -> Queue:
    """The declaration of one metric queue, the same for producers and workers.

    Args:
        settings: The settings (the broker decides the arguments).
        name: The queue, ``eval.<metric>``.

    Returns:
        On RabbitMQ a durable quorum queue on the ``eval`` topic exchange with a
        dead-letter exchange and a delivery limit; elsewhere the queue Celery would
        create by itself (a direct exchange of the same name).
    """
    if not is_amqp(settings):
        return Queue(name, Exchange(name, type="direct"), routing_key=name)
    return Queue(
        name, Exchange(EVAL_EXCHANGE, type="topic", durable=True), routing_key=name,
        durable=True,
        queue_arguments={
            "x-queue-type": "quorum",
            "x-dead-letter-exchange": DEAD_LETTER_EXCHANGE,
            # At-least-once dead-lettering: a dead letter is dropped by neither side
            # until the eval.dead queue confirmed it (needs reject-publish overflow).
            "x-dead-letter-strategy": "at-least-once",
            "x-overflow": "reject-publish",
            "x-delivery-limit": DELIVERY_LIMIT,
        },
    )


def dead_letter_queue() -> Queue:
    """RabbitMQ: the durable quorum queue that keeps what metric queues dead-letter."""
    return Queue(DEAD_LETTER_QUEUE, Exchange(DEAD_LETTER_EXCHANGE, type="fanout", durable=True),
                 durable=True, queue_arguments={"x-queue-type": "quorum"})


def declare_queues(connection: Connection, queues: Iterable[Queue]) -> None:
    """RabbitMQ: declare the dead-letter queue, ``queues``, and the exchanges and queues
    that delay messages (Celery's native delayed delivery), binding ``queues`` to them.

    Producers call it before their first publish so a delayed job never goes to an
    exchange no worker has declared yet; workers declare the same at start. Every
    declaration is idempotent.

    Args:
        connection: An open connection to RabbitMQ.
        queues: Metric queues from :func:`eval_queue`.
    """
    queues = list(queues)
    channel = connection.default_channel
    dead_letter_queue().bind(channel).declare()
    for queue in queues:
        queue.bind(channel).declare()
    declare_native_delayed_delivery_exchanges_and_queues(connection, "quorum")
    for queue in queues:
        bind_queue_to_native_delayed_delivery_exchange(connection, queue)


def ready_messages(connection: Connection, queue: str) -> int:
    """RabbitMQ: messages ready for delivery in ``queue``, by a passive ``queue.declare``
    (creates and changes nothing; a queue never declared holds nothing).

    Raises:
        kombu's connection and channel errors for broker trouble other than a missing queue.
    """
    channel = connection.channel()
    try:
        _name, ready, _consumers = channel.queue_declare(queue=queue, passive=True)
        return int(ready)
    except connection.channel_errors as exc:
        # 404 NOT_FOUND closes the channel: the queue was never declared.
        if getattr(exc, "code", None) != 404:
            raise
        return 0
    finally:
        try:
            channel.close()
        except Exception as exc:  # a channel the broker closed already
            logger.debug("closing channel: %s", exc)


def broker_countdown_s(countdown_s: float, *, broker_url: str) -> float | None:
    """The countdown to publish a delayed message with, or None for no delay.

    RabbitMQ delays in whole seconds (Celery's native delayed delivery) and refuses a
    countdown under one second, so a positive delay is rounded up there; other brokers
    take it as it is.

    Args:
        countdown_s: The delay wanted.
        broker_url: The broker it is published to.
    """
    if countdown_s <= 0:
        return None
    return float(math.ceil(countdown_s)) if is_amqp_url(broker_url) else countdown_s
