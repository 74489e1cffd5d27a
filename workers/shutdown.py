"""Shutdown within a grace period: running jobs finish, or go back to the queue.

On SIGTERM Celery stops taking messages and waits for the running tasks (its warm
shutdown). A judge that answers slowly or hangs would keep it waiting until the
orchestrator's SIGKILL, and the jobs would then wait out the Redis visibility
timeout. So the wait has a deadline: ``EVALFLEET_SHUTDOWN_GRACE_S`` after the
signal, every task still waiting for the judge stops waiting
(the judge fleet, :class:`~workers.judge.fleet.JudgeFleet`, raises
:class:`~evalfleet.core.errors.WorkerShuttingDown`),
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
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any

from celery.signals import worker_shutting_down

logger = logging.getLogger(__name__)


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


def install_shutdown_deadline(deadline: ShutdownDeadline, *, grace_s: float,
                              on_begin: Callable[[], None] | None = None) -> None:
    """Start ``deadline`` when this process's Celery worker begins to shut down.

    Args:
        deadline: The worker's deadline, shared with its judge fleet.
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

