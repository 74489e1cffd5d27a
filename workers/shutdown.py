"""Shutdown within a grace period: running jobs finish, or go back to the queue.

On SIGTERM Celery stops taking messages and waits for the running tasks (its warm
shutdown). A judge that answers slowly or hangs would keep it waiting until the
orchestrator's SIGKILL, and the jobs would then wait out the Redis visibility
timeout. So the wait has a deadline: ``EVALFLEET_SHUTDOWN_GRACE_S`` after the
signal, every task still waiting for the judge stops waiting
(:class:`DeadlineJudge` raises :class:`~evalfleet.core.errors.WorkerShuttingDown`),
and the task re-publishes its message under the same task id, then acknowledges
the delivery (``workers.app.run_message``). The worker then exits on its own.

Why re-publish rather than exit without acknowledging: an unacknowledged Redis
message returns only after the visibility timeout (15 minutes by default), or when
the channel is closed cleanly, which a worker killed at its deadline does not
do; re-publishing puts the job back at once, on every broker, through the same
path as every other retry, and the publish is confirmed before the ack. Nothing
is lost: the message is acknowledged only after its copy is on the broker (a
crash in between leaves both, and the claim makes the second run a no-op). Nothing
is judged into two verdicts or twice: the verdicts the batch judged before the
deadline are stored already (each as its answer arrived), so the copy finds them
at its claim; it keeps the message id, so it takes over the claims of its other
keys at once; and a verdict key holds one verdict. The cost: judge calls in
flight at the deadline are made again by the next worker (they are counted by
the judge simulator in the tests).

Celery 5.5+ has a "soft shutdown" (``worker_soft_shutdown_timeout``) that does
something close for SIGQUIT, or SIGTERM with ``REMAP_SIGTERM=SIGQUIT``: it sleeps
the whole timeout even when the tasks finish early, then requeues the unacked
messages while the task threads keep running; with the threads pool the process
still waits for those threads, so it cannot exit before the judge answers.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any

from celery.signals import worker_shutting_down

from evalfleet.core.errors import JudgeError, WorkerShuttingDown
from workers.judge import JudgeClient, JudgeReply, JudgeRequest
from workers.judge.base import Answered

logger = logging.getLogger(__name__)

#: Seconds between two looks at the deadline while a task thread waits for answers.
DEADLINE_POLL_S = 0.2


class ShutdownDeadline:
    """When a worker stops waiting for its running jobs. Thread-safe.

    Before :meth:`begin` nothing expires; :meth:`begin` starts the grace period once,
    and :meth:`expire` ends it at once.
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._expired: Future[None] = Future()
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self.began_at: float | None = None
        """Monotonic time shutdown began, or None."""

    @property
    def draining(self) -> bool:
        """True once shutdown began (the worker takes no new jobs)."""
        return self.began_at is not None

    @property
    def expired(self) -> bool:
        """True once the grace period is over."""
        return self._expired.done()

    def begin(self, grace_s: float) -> None:
        """Start the grace period (later calls do nothing).

        Args:
            grace_s: Seconds running jobs may still take; 0 ends it at once.
        """
        with self._lock:
            if self.began_at is not None:
                return
            self.began_at = self._clock()
            if grace_s <= 0:
                self._set_expired()
                return
            self._timer = threading.Timer(grace_s, self.expire)
            self._timer.daemon = True
            self._timer.start()

    def expire(self) -> None:
        """End the grace period now: tasks waiting for the judge give up their jobs."""
        with self._lock:
            if self.began_at is None:
                self.began_at = self._clock()
            self._set_expired()

    def _set_expired(self) -> None:
        if not self._expired.done():
            self._expired.set_result(None)
            logger.warning("shutdown grace period over: no more waiting for the judge")

    def wait(self, result: Future[Any]) -> bool:
        """Block until ``result`` is done or the grace period ends.

        Returns:
            True when ``result`` is done.
        """
        wait([result, self._expired], return_when=FIRST_COMPLETED)
        return result.done()


class DeadlineJudge(JudgeClient):
    """A judge client that stops waiting for the judge when the shutdown deadline passes.

    The inner client runs on a daemon helper thread, so that the task thread can give
    up while the call is still in flight, and so that the process can exit without
    waiting for calls nobody will read.

    Args:
        inner: The judge client doing the work.
        deadline: The worker's shutdown deadline.
    """

    def __init__(self, inner: JudgeClient, *, deadline: ShutdownDeadline) -> None:
        self.inner = inner
        self._deadline = deadline

    def complete_many(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply | JudgeError]:
        """See :meth:`JudgeClient.complete_many`.

        Raises:
            WorkerShuttingDown: When the grace period ends before the judge answered.
        """
        if self._deadline.expired:
            raise WorkerShuttingDown("the worker is shutting down: not calling the judge")
        if not requests:
            return []
        result: Future[list[JudgeReply | JudgeError]] = Future()
        helper = threading.Thread(target=_run_into, args=(self.inner, requests, result),
                                  name="judge-wait", daemon=True)
        helper.start()
        if not self._deadline.wait(result):
            raise WorkerShuttingDown(
                f"the shutdown grace period ended with {len(requests)} judge request(s) "
                "unanswered")
        return result.result()

    def answers(self, requests: Sequence[JudgeRequest], *,
                gather_s: float = 0.0) -> Iterator[list[Answered]]:
        """See :meth:`JudgeClient.answers`: the inner client's answers, as they arrive.

        Raises:
            WorkerShuttingDown: When the grace period ends before the judge answered
                them all (the answers already handed over stay handed over).
        """
        if self._deadline.expired:
            raise WorkerShuttingDown("the worker is shutting down: not calling the judge")
        if not requests:
            return
        arrived: queue.SimpleQueue[list[Answered] | BaseException | None] = queue.SimpleQueue()
        helper = threading.Thread(target=_drain_into, args=(self.inner, requests, arrived),
                                  kwargs={"gather_s": gather_s}, name="judge-wait",
                                  daemon=True)
        helper.start()
        remaining = len(requests)
        while remaining:
            chunk = self._next(arrived, remaining=remaining)
            remaining -= len(chunk)
            yield chunk

    def _next(self, arrived: queue.SimpleQueue[list[Answered] | BaseException | None], *,
              remaining: int) -> list[Answered]:
        """The answers that arrived since the last look (waiting for one), or raise when
        the grace period ends first."""
        chunk: list[Answered] = []
        while not chunk:
            try:
                item = arrived.get(timeout=DEADLINE_POLL_S)
            except queue.Empty:
                if self._deadline.expired:
                    raise WorkerShuttingDown(
                        f"the shutdown grace period ended with {remaining} judge "
                        "request(s) unanswered") from None
                continue
            while True:
                if isinstance(item, BaseException):
                    raise item
                if item is None:  # the inner client is done
                    if len(chunk) < remaining:  # a broken client
                        raise RuntimeError(f"the judge client left {remaining - len(chunk)} "
                                           "request(s) unanswered")
                    break
                chunk.extend(item)
                try:
                    item = arrived.get_nowait()
                except queue.Empty:
                    break
        return chunk

    def close(self) -> None:
        """See :meth:`JudgeClient.close`."""
        self.inner.close()


def _drain_into(judge: JudgeClient, requests: Sequence[JudgeRequest],
                arrived: queue.SimpleQueue[list[Answered] | BaseException | None], *,
                gather_s: float) -> None:
    try:
        for chunk in judge.answers(requests, gather_s=gather_s):
            arrived.put(chunk)
        arrived.put(None)
    except BaseException as exc:  # handed to the waiting task thread
        arrived.put(exc)


def _run_into(judge: JudgeClient, requests: Sequence[JudgeRequest],
              result: Future[list[JudgeReply | JudgeError]]) -> None:
    try:
        result.set_result(judge.complete_many(requests))
    except BaseException as exc:  # handed to the waiting task thread
        result.set_exception(exc)


def install_shutdown_deadline(deadline: ShutdownDeadline, *, grace_s: float,
                              on_begin: Callable[[], None] | None = None) -> None:
    """Start ``deadline`` when this process's Celery worker begins to shut down.

    Args:
        deadline: The worker's deadline, shared with its :class:`DeadlineJudge`.
        grace_s: The grace period (``EVALFLEET_SHUTDOWN_GRACE_S``).
        on_begin: Also called when shutdown begins (health reporting).
    """
    def begin(sig: str = "", how: str = "", **_: Any) -> None:
        logger.warning("%s shutdown (%s): no new jobs; running jobs have %.0f s to finish",
                       how or "worker", sig or "signal", grace_s)
        deadline.begin(grace_s)
        if on_begin is not None:
            on_begin()

    worker_shutting_down.connect(begin, weak=False)

