"""Publishing jobs to the metric queues through the broker.

The one place where broker exceptions become :class:`BrokerUnavailable`.

Delayed evaluation uses Celery's countdown (the job carries an ETA; a worker
takes it, holds it unacknowledged and runs it when due). Chosen over holding jobs
in a Redis sorted set until due because it needs no releasing process that could
itself be down, works on every broker including the embedded one, and is what the
workers already use for retries, under the same visibility-timeout constraint
(checked when the sampling config is loaded). Its cost: a delay must stay below
the visibility timeout less two judge calls, so it suits delays of seconds to
minutes (a trace being finished), not hours. On RabbitMQ the delay waits in the
broker instead (Celery's native delayed delivery for quorum queues, whole seconds),
and every publish waits for the broker's confirm.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from celery import Celery

from evalfleet.broker import serializer
from evalfleet.broker.errors import BROKER_ERRORS
from evalfleet.broker.publish import QueueDeclarations
from evalfleet.broker.queues import broker_countdown_s, broker_transport_options, is_amqp, is_redis
from evalfleet.core.errors import BrokerUnavailable
from evalfleet.core.message import EVALUATE_TASK, Job, encode_batch, encode_job, queue_for
from evalfleet.core.metric import load_registry
from evalfleet.core.settings import Settings

#: Jobs buffered in one Redis pipeline before it is sent (kombu's batch size).
DEFAULT_BATCH_SIZE = 500


class Enqueuer:
    """Sends jobs to ``eval.<metric>`` as evaluate tasks (JSON, persistent). Thread-safe."""

    def __init__(self, settings: Settings, *, batch_size: int | None = None,
                 check_metrics: Collection[str] | None = None) -> None:
        """A publish-only Celery app for the configured broker.

        Args:
            settings: The settings (broker URL, producer timeouts).
            batch_size: Jobs per Redis pipeline in :meth:`send_many`.
            check_metrics: The metrics of kind ``check``: their messages carry
                ``EVALFLEET_CHECK_BATCH_SIZE`` jobs, the others ``EVALFLEET_BATCH_SIZE``.
                None reads them from the configured metric files, so every producer
                (beat, replay, calibration, demo) sizes a check metric's messages alike.

        Raises:
            InvalidMetricSpec: When ``check_metrics`` is None and a metric file is invalid.
        """
        serializer.register()
        # A publish-only app: it never imports the worker side.
        self._app = Celery("evalfleet-producer", broker=settings.resolved_broker_url(),
                           set_as_current=False)
        options = broker_transport_options(settings, concurrency=1)
        # Fail fast rather than hang a producer on a broker that stopped answering.
        timeout_s = settings.limits.producer_broker_timeout_s
        if is_redis(settings):
            options = {**options, "socket_timeout": timeout_s,
                       "socket_connect_timeout": timeout_s}
        elif is_amqp(settings):  # the read timeout also bounds the wait for a confirm
            options = {**options, "connect_timeout": timeout_s, "read_timeout": timeout_s,
                       "write_timeout": timeout_s}
        self._app.conf.update(
            broker_transport_options=options,
            broker_connection_retry_on_startup=True,
            task_serializer=serializer.JOB_JSON, accept_content=["json"], result_backend=None,
            task_ignore_result=True, task_create_missing_queues=True,
        )
        self._batch_size = batch_size or settings.limits.producer_batch_size or DEFAULT_BATCH_SIZE
        self._jobs_per_message = settings.broker.batch_size
        if check_metrics is None:
            check_metrics = load_registry(settings.judge.metrics_dir).check_names()
        self._check_metrics = frozenset(check_metrics)
        self._jobs_per_check_message = settings.broker.jobs_per_message(check=True)
        self._broker_url = settings.resolved_broker_url()
        self._queues = QueueDeclarations(self._app, settings)
        self._declare = self._queues.declare

    def send(self, job: Job, *, delay_s: float = 0.0) -> None:
        """Publish one job.

        Args:
            job: The job.
            delay_s: Seconds before a worker may run it.

        Raises:
            BrokerUnavailable: When the broker cannot be reached.
        """
        try:
            self._prepare([job.metric])
            self._app.send_task(EVALUATE_TASK, declare=self._declare, **_task_options(
                job, countdown_s=broker_countdown_s(delay_s, broker_url=self._broker_url)))
        except BROKER_ERRORS as exc:
            raise BrokerUnavailable(f"cannot publish to the broker: {exc}") from exc

    def send_many(self, jobs: Sequence[Job], *,
                  delays_s: Mapping[str, float] | None = None) -> None:
        """Publish jobs as batch messages, ``EVALFLEET_BATCH_SIZE`` jobs of one metric each
        (``EVALFLEET_CHECK_BATCH_SIZE`` for a check metric; a worker runs a message as one
        task), in Redis pipelines of ``batch_size`` messages.

        Args:
            jobs: The jobs.
            delays_s: Delay before judging, per metric.

        Raises:
            BrokerUnavailable: When the broker cannot be reached. Delivery of the jobs
                is then uncertain (some may have been published): publishing them
                again is safe, since a verdict is stored once per key.
        """
        if not jobs:
            return
        delays_s = delays_s or {}
        try:
            self._prepare(job.metric for job in jobs)
            with self._app.producer_or_acquire() as producer, \
                    producer.batch(max_size=self._batch_size):
                for message_jobs in _messages(jobs, size_for=self._message_size):
                    metric = message_jobs[0].metric
                    countdown_s = broker_countdown_s(delays_s.get(metric, 0.0),
                                                     broker_url=self._broker_url)
                    self._app.send_task(
                        EVALUATE_TASK, producer=producer, declare=self._declare,
                        **_batch_options(message_jobs, countdown_s=countdown_s),
                    )
        except BROKER_ERRORS as exc:
            raise BrokerUnavailable(f"cannot publish to the broker: {exc}") from exc

    def _message_size(self, metric: str) -> int:
        """Most jobs of ``metric`` in one message."""
        if metric in self._check_metrics:
            return self._jobs_per_check_message
        return self._jobs_per_message

    def _prepare(self, metrics: Iterable[str]) -> None:
        """Declare the queues of ``metrics`` as the workers do, once per queue."""
        self._queues.prepare(metrics)

    def ping(self) -> None:
        """Check that the broker answers.

        Raises:
            BrokerUnavailable: When it does not.
        """
        try:
            with self._app.connection_for_write() as connection:
                connection.ensure_connection(max_retries=1, interval_start=0,
                                             interval_step=0, timeout=2)
                connection.default_channel  # noqa: B018 - opening a channel talks to it
        except BROKER_ERRORS as exc:
            raise BrokerUnavailable(f"broker unreachable: {exc}") from exc

    def close(self) -> None:
        """Close broker connections."""
        self._app.close()


def _messages(jobs: Sequence[Job], *, size_for: Callable[[str], int]) -> list[list[Job]]:
    """The jobs grouped by metric, in messages of at most ``size_for(metric)`` jobs (order
    kept per metric)."""
    by_metric: dict[str, list[Job]] = {}
    for job in jobs:
        by_metric.setdefault(job.metric, []).append(job)
    return [group[start:start + size] for metric, group in by_metric.items()
            for size in (size_for(metric),) for start in range(0, len(group), size)]


def _batch_options(jobs: list[Job], *, countdown_s: float | None) -> dict[str, Any]:
    return {
        "args": [encode_batch(jobs)], "queue": queue_for(jobs[0].metric),
        "countdown": countdown_s,
        "argsrepr": f"[{jobs[0].metric} {len(jobs)} jobs from {jobs[0].sample.id!r}]",
        "kwargsrepr": "{}",
    }


def _task_options(job: Job, *, countdown_s: float | None) -> dict[str, Any]:
    return {
        "args": [encode_job(job)], "queue": queue_for(job.metric),
        "countdown": countdown_s,
        # Celery would otherwise build a repr of the whole sample for its logs and
        # events: a third of the publishing time, and sample text in Flower.
        "argsrepr": f"[{job.metric} {job.sample.id!r}]", "kwargsrepr": "{}",
    }
