"""Publishing evaluate messages from any Celery app, to metric queues declared as the
workers declare them.

On RabbitMQ a metric queue is a quorum queue (:func:`~evalfleet.broker.queues.eval_queue`);
a Celery app that sends to a queue it was not configured with declares a classic queue
of that name, which RabbitMQ refuses next to the workers' quorum queue. So whoever
publishes, a producer's :class:`~producers.enqueuer.Enqueuer` or the beat sending a
batch-mode job back to its queue (:class:`QueuePublisher`), registers and declares each
queue through :class:`QueueDeclarations` first: the same arguments, the dead-letter
queue and the delay exchanges a delayed job needs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Any

from celery import Celery

from evalfleet.broker.errors import BROKER_ERRORS
from evalfleet.broker.queues import (
    broker_countdown_s,
    declare_queues,
    eval_queue,
    is_amqp,
    is_redis,
)
from evalfleet.core.errors import BrokerUnavailable
from evalfleet.core.message import EVALUATE_TASK, Job, encode_batch, queue_for
from evalfleet.core.settings import Settings


class QueueDeclarations:
    """The metric queues one Celery app publishes to, each declared once as workers do.

    Args:
        app: The publishing app.
        settings: The settings (the broker decides the declarations).
    """

    def __init__(self, app: Celery, settings: Settings) -> None:
        self._app = app
        self._settings = settings
        self._prepared: set[str] = set()
        self._lock = threading.Lock()
        # Celery sends a direct queue's messages through the anonymous exchange, so on
        # Redis a job reaches its list by name whether or not the queue was declared:
        # declaring it again with every message only rewrote kombu's binding set, a fifth
        # of Celery's cost per message. RabbitMQ keeps Celery's declaration (cached per
        # connection), which recreates a queue deleted while the publisher runs.
        self.declare: list[Any] | None = [] if is_redis(settings) else None
        """What to pass as ``send_task``'s ``declare``."""

    def prepare(self, metrics: Iterable[str]) -> None:
        """Declare the queues of ``metrics`` as the workers do, once per queue.

        On RabbitMQ a queue declared with other arguments than the workers' is an
        error, and a delayed job needs the delay exchanges, so both come from
        :mod:`evalfleet.broker.queues`; elsewhere this only registers the queue by name.

        Raises:
            The broker libraries' errors (the caller names them).
        """
        names = {queue_for(metric) for metric in metrics} - self._prepared
        if not names:
            return
        with self._lock:
            queues = [eval_queue(self._settings, name) for name in sorted(names - self._prepared)]
            if is_amqp(self._settings) and queues:
                with self._app.connection_for_write() as connection:
                    declare_queues(connection, queues)
            for queue in queues:
                self._app.amqp.queues.add(queue)
                self._prepared.add(queue.name)


class QueuePublisher:
    """Sends jobs back to their metric queues from a Celery app that consumes other queues
    (the beat): one evaluate message per call, as a worker's retry sends it.

    Args:
        app: The app to publish from.
        settings: The settings.
    """

    def __init__(self, app: Celery, settings: Settings) -> None:
        self._app = app
        self._broker_url = settings.resolved_broker_url()
        self.queues = QueueDeclarations(app, settings)

    def publish(self, jobs: Sequence[Job], *, countdown_s: float) -> None:
        """Publish ``jobs`` (one metric) as one message, runnable after ``countdown_s``.

        Raises:
            BrokerUnavailable: When the broker cannot be reached.
        """
        if not jobs:
            return
        try:
            self.queues.prepare([jobs[0].metric])
            self._app.send_task(
                EVALUATE_TASK, args=[encode_batch(list(jobs))], queue=queue_for(jobs[0].metric),
                countdown=broker_countdown_s(countdown_s, broker_url=self._broker_url),
                declare=self.queues.declare,
                argsrepr=f"[{jobs[0].metric} {len(jobs)} jobs from {jobs[0].sample.id!r}]",
                kwargsrepr="{}")
        except BROKER_ERRORS as exc:
            raise BrokerUnavailable(f"cannot publish to the broker: {exc}") from exc
