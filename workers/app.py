"""The Celery application: broker settings that keep jobs safe, and the evaluate task.

Jobs survive worker crashes: they are acknowledged only after their verdict or
dead letter is stored (late acks), a worker reserves only what it can run, and
the Redis visibility timeout exceeds the longest retry countdown so a delayed
job is never handed out twice (on RabbitMQ an unacknowledged job returns when the
worker's connection drops, and countdowns wait in the broker, not in a worker).
On SIGTERM a worker finishes its running jobs within the grace period and puts
back those still waiting for the judge (:mod:`workers.shutdown`). There is no
result backend: verdicts are the results. Payloads are JSON only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from celery import Celery, Task, bootsteps
from celery.exceptions import Reject
from celery.signals import after_setup_logger, after_setup_task_logger, worker_ready

from evalfleet.broker.queues import (
    broker_countdown_s,
    broker_transport_options,
    declare_queues,
    eval_queue,
    is_amqp,
    is_redis,
)
from evalfleet.core.errors import InvalidMessage, StoreUnavailable
from evalfleet.core.gc_tuning import tune_collector
from evalfleet.core.log import install_secret_filter
from evalfleet.core.message import (
    EVALUATE_TASK,
    Job,
    decode_batch,
    encode_batch,
    queue_for,
)
from evalfleet.core.settings import Settings
from evalfleet.store import DeadLetter
from workers.evaluation import STORE_PAUSE_S
from workers.health.activity import WorkerActivity
from workers.outcome import FatePort, Outcome, carry_out, summary
from workers.runtime import LazyRuntime, Runtime
from workers.save_message import SAVE_TASK, UnsavedBatch, decode_save, encode_save
from workers.shutdown import ShutdownDeadline, install_shutdown_deadline

logger = logging.getLogger(__name__)

#: Redis: look for jobs past the visibility timeout on every sweep (kombu sweeps every
#: 10 s). kombu 5.7 looks on every tenth sweep only, so a job a killed worker held came
#: back up to 100 s after its visibility timeout instead of within 10 s.
REDIS_RESTORE_OPTIONS = {"unacked_restore_throttle": 1}

#: Redis: the transport that never holds a popped job outside Redis.
REDIS_TRANSPORT = "evalfleet.broker.redis_transport:Transport"

#: Longest the worker's event loop sleeps, in seconds. A signal does not wake it, and
#: on RabbitMQ nothing else may for 10 s, which SIGTERM would otherwise wait out.
LOOP_WAKEUP_S = 1.0


def create_app(
    settings: Settings, *, concurrency: int, queues: Sequence[str] = (),
    activity: WorkerActivity | None = None, deadline: ShutdownDeadline | None = None,
) -> Celery:
    """A Celery app configured from ``settings``, with the evaluate task registered.

    Args:
        settings: The settings.
        concurrency: Jobs one worker process runs at once (sizes connection pools).
        queues: The metric queues it consumes (declared as :func:`celery_config` says).
        activity: Where the task reports started and finished messages (health).
        deadline: The shutdown deadline its judge calls give up at.
    """
    app = Celery("evalfleet", broker=settings.resolved_broker_url(), set_as_current=False)
    app.conf.update(celery_config(settings, concurrency=concurrency, queues=queues))
    runtime = LazyRuntime(settings, concurrency=concurrency,
                          deadline=deadline or ShutdownDeadline())
    _register_evaluate(app, runtime, activity=activity or WorkerActivity())
    app.steps["consumer"].add(_LoopWakeup)
    _scrub_celery_logs(settings.secret_values())
    return app


class _LoopWakeup(bootsteps.StartStopStep):
    """Wakes the consumer's event loop every :data:`LOOP_WAKEUP_S`, so that it sees a
    shutdown request within a second (an idle RabbitMQ consumer otherwise sleeps up to
    10 s in one poll)."""

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self._entry: Any = None

    def start(self, parent: Any) -> None:
        self._entry = parent.timer.call_repeatedly(LOOP_WAKEUP_S, _nothing)

    def stop(self, parent: Any) -> None:  # the consumer restarts after a lost connection
        if self._entry is not None:
            self._entry.cancel()
            self._entry = None


def _nothing() -> None:
    return None


def prepare_worker(app: Celery, settings: Settings, *, activity: WorkerActivity,
                   deadline: ShutdownDeadline) -> None:
    """Wire this process as a worker: shutdown deadline, health activity, RabbitMQ queues.

    Args:
        app: The app from :func:`create_app`, with the same ``activity`` and ``deadline``.
        settings: The settings.
        activity: Marked as consuming once the worker is ready, draining on shutdown.
        deadline: Started when shutdown begins (``EVALFLEET_SHUTDOWN_GRACE_S``).
    """
    install_shutdown_deadline(deadline, grace_s=settings.worker.shutdown_grace_s,
                              on_begin=activity.drain)

    def consuming(**_: Any) -> None:
        activity.consuming()

    worker_ready.connect(consuming, weak=False)
    worker_ready.connect(lambda **_: tune_collector(), weak=False)
    if is_amqp(settings):
        # The dead-letter queue and the delay exchanges must exist before any message
        # is rejected or delayed; producers declare the same.
        with app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=10, interval_start=1, interval_step=2,
                                         interval_max=5)
            declare_queues(connection, app.conf.task_queues or [])


def celery_config(settings: Settings, *, concurrency: int,
                  queues: Sequence[str] = ()) -> dict[str, Any]:
    """The Celery settings evalfleet runs with.

    Args:
        settings: The settings.
        concurrency: Jobs one worker process runs at once.
        queues: The metric queues it consumes (and re-publishes retries to), declared
            as :func:`evalfleet.broker.queues.eval_queue` says (RabbitMQ: quorum queues, which
            also makes Celery drop global QoS and delay countdowns in the broker).
    """
    return {
        # Redis: pop and record as unacknowledged in one step (evalfleet.broker.redis_transport).
        "broker_transport": (REDIS_TRANSPORT if is_redis(settings)
                             and settings.broker.redis_atomic_consume else None),
        "broker_transport_options": {
            **broker_transport_options(settings, concurrency=concurrency),
            **(REDIS_RESTORE_OPTIONS if is_redis(settings) else {}),
        },
        "task_queues": [eval_queue(settings, name) for name in queues] or None,
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


def _register_evaluate(app: Celery, runtime: LazyRuntime, *,
                       activity: WorkerActivity) -> None:
    """Register the evaluate task (judge a message's samples, store the verdicts) and
    the save task (store the verdicts of a save message, judged while the database was
    away), each reporting to ``activity``."""
    runners: dict[str, Callable[..., str]] = {EVALUATE_TASK: run_message, SAVE_TASK: run_save}
    for name, run in runners.items():
        # shared=False: the task belongs to this app only, with this app's runtime.
        app.task(name=name, bind=True, shared=False)(
            _reporting(run, runtime=runtime, activity=activity))


def _reporting(run: Callable[..., str], *, runtime: LazyRuntime,
               activity: WorkerActivity) -> Callable[[Task, Any], str]:
    def task(task: Task, message: Any) -> str:
        activity.started()
        try:
            return run(task, message, runtime.get(), activity=activity)
        finally:
            activity.finished()

    task.__doc__ = run.__doc__
    return task


def run_message(task: Task, message: Any, runtime: Runtime, *,
                activity: WorkerActivity | None = None) -> str:
    """Run one message (a job or a batch) through the evaluator and carry out its decisions.

    Nothing is acknowledged unless each job ended as a verdict, a dead letter or a
    re-published job: when even that fails, the message goes back to the queue.

    Args:
        task: The bound evaluate task (its request is the delivery).
        message: The message body.
        runtime: The process's runtime.
        activity: Told about queues this worker pauses.

    Returns:
        The outcome kinds with their counts, for Celery's log line.
    """
    try:
        jobs = decode_batch(message)
    except InvalidMessage as exc:
        logger.warning("dead letter: %s", exc)
        _keep_as_dead_letters(runtime, [_undecodable(message, exc)])
        return "dead_letter"
    outcomes = runtime.evaluator.deliver(
        jobs, owner=str(task.request.id), keep=lambda unsaved: _publish_save(task, unsaved))
    return summary(carry_out(outcomes, TaskPort(task, runtime, queue=queue_for(jobs[0].metric),
                                                activity=activity)))


class TaskPort(FatePort):
    """Carries outcomes out for one Celery delivery: to the broker, the store and this
    worker's consumer (:func:`workers.outcome.carry_out`). All of it happens before the
    delivery is acknowledged; a step that fails rejects the delivery back to its queue.

    Args:
        task: The bound task (its request is the delivery).
        runtime: The process's runtime.
        queue: The jobs' queue.
        activity: Told about queues this worker pauses.
    """

    def __init__(self, task: Task, runtime: Runtime, *, queue: str,
                 activity: WorkerActivity | None = None) -> None:
        self.task = task
        self.runtime = runtime
        self.queue = queue
        self.activity = activity
        # A countdown longer than the visibility timeout gets the waiting message handed
        # out a second time, same id and so same claims: both copies judge the same jobs.
        # The settings fit retry_max_s in the timeout, so no countdown may exceed it.
        self.longest_countdown_s = runtime.evaluator.options.retry_max_s

    def keep_letters(self, letters: Sequence[DeadLetter]) -> None:
        """See :meth:`FatePort.keep_letters`."""
        _keep_as_dead_letters(self.runtime, list(letters))

    def requeue(self, jobs: Sequence[Job], *, countdown_s: float, reason: str) -> None:
        """See :meth:`FatePort.requeue`: one message, under this delivery's id."""
        _publish(self.task, list(jobs), countdown_s=countdown_s,
                 task_id=str(self.task.request.id))

    def retry(self, job: Job, *, countdown_s: float, reason: str) -> None:
        """See :meth:`FatePort.retry`."""
        _publish(self.task, [job], countdown_s=countdown_s)
        logger.info("retry %s/%s in %.1fs: %s", job.metric, job.sample.id, countdown_s, reason)

    def put_back(self, jobs: Sequence[Job]) -> None:
        """See :meth:`FatePort.put_back`."""
        _publish(self.task, list(jobs), countdown_s=0.0)

    def pause(self, *, pause_s: float, reason: str) -> None:
        """See :meth:`FatePort.pause`: this worker stops consuming the queue."""
        _pause_queue(self.task, self.runtime, queue=self.queue, pause_s=pause_s,
                     reason=reason, activity=self.activity)


class SavePort(TaskPort):
    """:class:`TaskPort` for a save message: what goes back is the message itself.

    Args:
        message: The save message's body.
    """

    def __init__(self, task: Task, runtime: Runtime, *, message: Any, queue: str,
                 activity: WorkerActivity | None = None) -> None:
        super().__init__(task, runtime, queue=queue, activity=activity)
        self.message = message

    def requeue(self, jobs: Sequence[Job], *, countdown_s: float, reason: str) -> None:
        """See :meth:`FatePort.requeue`: the save message, under its own id."""
        _republish(self.task, self.message, queue=self.queue,
                   task_id=str(self.task.request.id))


def run_save(task: Task, message: Any, runtime: Runtime, *,
             activity: WorkerActivity | None = None) -> str:
    """Store the rows of a save message (:mod:`workers.save_message`); idempotent.

    While the database is unavailable the message goes back to its queue under the
    same id and the worker pauses that queue, as for a job. Rows the database refuses
    for good become dead letters of the jobs they judged (replayable).

    Args:
        task: The bound save task.
        message: The message body.
        runtime: The process's runtime.
        activity: Told about queues this worker pauses.

    Returns:
        What became of the rows, for Celery's log line.
    """
    try:
        unsaved = decode_save(message)
    except InvalidMessage as exc:
        logger.warning("dead letter: %s", exc)
        _keep_as_dead_letters(runtime, [_undecodable(message, exc)])
        return "dead_letter"
    queue = queue_for(unsaved.metric)
    try:
        new = runtime.store.save(verdicts=unsaved.verdicts, dead_letters=unsaved.dead_letters,
                                 release=unsaved.release, owner=unsaved.owner)
    except StoreUnavailable as exc:
        logger.warning("%s; a save message of %d verdict(s) goes back to %s", exc,
                       len(unsaved.verdicts), queue)
        outcomes = [Outcome.requeued(None, countdown_s=0.0, reason=f"{exc}",
                                     pause_s=STORE_PAUSE_S)]
        carry_out(outcomes, SavePort(task, runtime, message=message, queue=queue,
                                     activity=activity))
        return "retry"
    except Exception as exc:
        logger.exception("dead letter: %d saved verdict(s) of %s could not be stored",
                         len(unsaved.verdicts), unsaved.metric)
        letters = [*(_internal_error(job, exc) for job in unsaved.jobs), *unsaved.dead_letters]
        carry_out([Outcome.dead_letter(letter.error_class, letter=letter) for letter in letters],
                  SavePort(task, runtime, message=message, queue=queue, activity=activity))
        return "dead_letter"
    return f"{new} saved, {len(unsaved.verdicts) - new} stored before"


def _publish_save(task: Task, unsaved: UnsavedBatch) -> None:
    """Publish ``unsaved`` as a save message to its jobs' queue; returns once the broker
    has it (RabbitMQ: confirmed), so the jobs may be acknowledged."""
    task.app.send_task(SAVE_TASK, args=[encode_save(unsaved)], queue=queue_for(unsaved.metric))
    logger.warning("the database is unavailable: %d judged verdict(s) of %s wait in a save "
                   "message", len(unsaved.verdicts), unsaved.metric)


def _republish(task: Task, message: Any, *, queue: str, task_id: str) -> None:
    try:
        task.apply_async(args=[message], queue=queue, task_id=task_id)
    except Exception as exc:
        raise Reject(f"cannot re-publish: {exc}", requeue=True) from exc


def _pause_queue(task: Task, runtime: Runtime, *, queue: str, pause_s: float, reason: str,
                 activity: WorkerActivity | None) -> None:
    """Stop this worker consuming ``queue`` for ``pause_s``: the judge refuses access, or
    the database is down, and taking more jobs would only send them round again."""
    now = time.monotonic()
    with runtime.lock:
        if runtime.paused_until.get(queue, 0.0) > now:
            return
        runtime.paused_until[queue] = now + pause_s
    if activity is not None:  # a paused queue with jobs in it is no sign of a stall
        activity.pause(queue, for_s=pause_s)
    logger.error("pausing %s for %.3g s, %s", queue, pause_s, reason)
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
    countdown = broker_countdown_s(countdown_s, broker_url=str(task.app.conf.broker_url))
    try:
        task.apply_async(args=[encode_batch(jobs)], queue=queue_for(jobs[0].metric),
                         countdown=countdown, task_id=task_id)
    except Exception as exc:
        # Put the message back rather than acknowledge a job that went nowhere.
        raise Reject(f"cannot re-publish: {exc}", requeue=True) from exc


def _keep_as_dead_letters(runtime: Runtime, letters: list[DeadLetter]) -> None:
    try:
        runtime.store.save(dead_letters=letters, owner="")
    except Exception as exc:
        raise Reject(f"cannot store the dead letter: {exc}", requeue=True) from exc


def _internal_error(job: Job, exc: Exception) -> DeadLetter:
    return DeadLetter.of_job(job, error_class="internal_error",
                             error=f"{type(exc).__name__}: {exc}", at=datetime.now(UTC))


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
