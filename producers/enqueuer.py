"""Publishing jobs to the metric queues through the broker."""

from __future__ import annotations

from celery import Celery

from evalfleet.broker import broker_transport_options
from evalfleet.message import EVALUATE_TASK, Job, encode_job, queue_for
from evalfleet.settings import Settings


class Enqueuer:
    """Sends jobs to ``eval.<metric>`` as evaluate tasks (JSON, persistent)."""

    def __init__(self, settings: Settings) -> None:
        # A publish-only app: it never imports the worker side.
        self._app = Celery("evalfleet-producer", broker=settings.resolved_broker_url(),
                           set_as_current=False)
        self._app.conf.update(
            broker_transport_options=broker_transport_options(settings, concurrency=1),
            broker_connection_retry_on_startup=True,
            task_serializer="json", accept_content=["json"], result_backend=None,
            task_ignore_result=True, task_create_missing_queues=True,
        )

    def send(self, job: Job) -> None:
        """Publish one job.

        Raises:
            kombu.exceptions.OperationalError: When the broker cannot be reached.
        """
        self._app.send_task(EVALUATE_TASK, args=[encode_job(job)], queue=queue_for(job.metric))

    def close(self) -> None:
        """Close broker connections."""
        self._app.close()
