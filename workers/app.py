"""The Celery application: broker settings that keep jobs safe, and the evaluate task.

Jobs survive worker crashes: they are acknowledged only after their verdict or
dead letter is stored (late acks), a worker reserves only what it can run, and
the Redis visibility timeout exceeds the longest retry countdown so a delayed
job is never handed out twice. There is no result backend: verdicts are the
results. Payloads are JSON only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from celery import Celery, Task
from celery.exceptions import Reject
from celery.signals import after_setup_logger, after_setup_task_logger

from evalfleet.broker import broker_transport_options, is_redis
from evalfleet.errors import InvalidMessage, StoreUnavailable
from evalfleet.log import install_secret_filter
from evalfleet.message import (
    EVALUATE_TASK,
    Job,
    decode_batch,
    encode_batch,
    encode_job,
    queue_for,
)
from evalfleet.settings import Settings
from workers.runtime import LazyRuntime, Runtime
from workers.store import DeadLetter

logger = logging.getLogger(__name__)

#: Seconds before a job runs again when the database could not be reached.
STORE_RETRY_S = 10.0


def create_app(settings: Settings, *, concurrency: int) -> Celery:
    """A Celery app configured from ``settings``, with the evaluate task registered.

    Args:
        settings: The settings.
        concurrency: Jobs one worker process runs at once (sizes connection pools).
    """
    app = Celery("evalfleet", broker=settings.resolved_broker_url(), set_as_current=False)
    app.conf.update(celery_config(settings, concurrency=concurrency))
    _register_evaluate(app, LazyRuntime(settings, concurrency=concurrency))
    _scrub_celery_logs(settings.secret_values())
    return app


def celery_config(settings: Settings, *, concurrency: int) -> dict[str, Any]:
    """The Celery settings evalfleet runs with."""
    return {
        "broker_transport_options": broker_transport_options(settings, concurrency=concurrency),
        "broker_connection_retry_on_startup": True,
        "task_serializer": "json",
        "accept_content": ["json"],
        "result_backend": None,
        "task_ignore_result": True,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_create_missing_queues": True,
        "worker_prefetch_multiplier": 1,
        # Redis only: fetch a job only when a slot is free, so a busy worker does
        # not sit on jobs an idle one could run.
        "worker_disable_prefetch": is_redis(settings),
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "worker_send_task_events": False,
        "task_send_sent_event": False,
        "worker_hijack_root_logger": True,
    }


def _register_evaluate(app: Celery, runtime: LazyRuntime) -> None:
    # shared=False: the task belongs to this app only, with this app's runtime.
    @app.task(name=EVALUATE_TASK, bind=True, shared=False)
    def evaluate(task: Task, message: Any) -> str:
        """Judge the samples of one message on their metric and store the verdicts."""
        return run_message(task, message, runtime.get())


def run_message(task: Task, message: Any, runtime: Runtime) -> str:
    """Run one message (a job or a batch) through the evaluator and carry out its decisions.

    Nothing is acknowledged unless each job ended as a verdict, a dead letter or a
    re-published job: when even that fails, the message goes back to the queue.

    Returns:
        The outcome kinds with their counts, for Celery's log line.
    """
    try:
        jobs = decode_batch(message)
    except InvalidMessage as exc:
        logger.warning("dead letter: %s", exc)
        _keep_as_dead_letters(runtime, [_undecodable(message, exc)])
        return "dead_letter"
    message_id = str(task.request.id)
    try:
        outcomes = runtime.evaluator.run_batch(jobs, owner=message_id)
    except StoreUnavailable as exc:
        # Same message id, so the claims this delivery holds are still its own.
        logger.warning("%s; %d %s job(s) run again in %ss", exc, len(jobs), jobs[0].metric,
                       STORE_RETRY_S)
        _publish(task, jobs, countdown_s=STORE_RETRY_S, task_id=message_id)
        return "retry"
    except Exception as exc:  # a bug must not lose the jobs: keep them for replay
        logger.exception("dead letter: %d %s job(s) failed unexpectedly", len(jobs),
                         jobs[0].metric)
        _keep_as_dead_letters(runtime, [_internal_error(job, exc) for job in jobs])
        return "dead_letter"
    for outcome in outcomes:
        if outcome.retry_job is not None:
            # Publish the retry before this delivery is acknowledged: at worst a crash
            # in between runs the job twice, and the claim makes that harmless.
            _publish(task, [outcome.retry_job], countdown_s=outcome.countdown_s)
            logger.info("retry %s/%s in %.1fs: %s", outcome.retry_job.metric,
                        outcome.retry_job.sample.id, outcome.countdown_s, outcome.detail)
    paused = [outcome for outcome in outcomes if outcome.kind == "paused"]
    if paused:
        _pause_queue(task, runtime, queue=queue_for(jobs[0].metric), reason=paused[0].detail)
    kinds = Counter(outcome.kind for outcome in outcomes)
    return ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))


def _pause_queue(task: Task, runtime: Runtime, *, queue: str, reason: str) -> None:
    """Stop this worker consuming ``queue`` for a while: its judge refuses access."""
    pause_s = runtime.evaluator.options.access_pause_s
    now = time.monotonic()
    with runtime.lock:
        if runtime.paused_until.get(queue, 0.0) > now:
            return
        runtime.paused_until[queue] = now + pause_s
    logger.error("pausing %s for %.0f s, its judge refuses access: %s", queue, pause_s, reason)
    hostname = task.request.hostname
    control = task.app.control
    control.cancel_consumer(queue, destination=[hostname])
    resume = threading.Timer(pause_s, control.add_consumer, args=(queue,),
                             kwargs={"destination": [hostname]})
    resume.daemon = True
    resume.start()


def _publish(
    task: Task, jobs: list[Job], *, countdown_s: float, task_id: str | None = None,
) -> None:
    try:
        task.apply_async(args=[encode_batch(jobs)], queue=queue_for(jobs[0].metric),
                         countdown=countdown_s, task_id=task_id)
    except Exception as exc:
        # Put the message back rather than acknowledge a job that went nowhere.
        raise Reject(f"cannot re-publish: {exc}", requeue=True) from exc


def _keep_as_dead_letters(runtime: Runtime, letters: list[DeadLetter]) -> None:
    try:
        runtime.store.save(dead_letters=letters, owner="")
    except Exception as exc:
        raise Reject(f"cannot store the dead letter: {exc}", requeue=True) from exc


def _internal_error(job: Job, exc: Exception) -> DeadLetter:
    return DeadLetter(
        sample_id=job.sample.id, metric=job.metric, error_class="internal_error",
        error=f"{type(exc).__name__}: {exc}", attempts=job.attempt, payload=encode_job(job),
        created_at=datetime.now(UTC),
    )


def _undecodable(message: Any, exc: InvalidMessage) -> DeadLetter:
    sample = message.get("sample") if isinstance(message, dict) else None
    sample_id = sample.get("id") if isinstance(sample, dict) else None
    metric = message.get("metric") if isinstance(message, dict) else None
    return DeadLetter(
        sample_id=sample_id if isinstance(sample_id, str) else None,
        metric=metric if isinstance(metric, str) else None,
        error_class="invalid_message", error=str(exc), attempts=0,
        payload=message, created_at=datetime.now(UTC),
    )


def _scrub_celery_logs(secrets: list[str]) -> None:
    def install(logger: logging.Logger, **_: Any) -> None:
        install_secret_filter(secrets, logger=logger)

    after_setup_logger.connect(install, weak=False)
    after_setup_task_logger.connect(install, weak=False)
