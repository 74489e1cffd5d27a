"""One fleet's batch round: submit what is due, collect what finished, one beat at a time.

``evalfleet beat`` runs :meth:`BatchRounds.run` every ``batch_poll_s``. A lock in the
fleet's shared Redis keeps two beats from running a round at once (the submitter's
recovery of a batch in doubt must not run twice); a fleet without shared Redis runs one
beat. The lock lives :func:`lock_ttl_s` and is renewed while the round runs, so a beat
SIGKILLed mid-round holds up the others for that long only, however long a round takes.
A round stopped anywhere (a SIGKILL, the provider or the database away) is finished
by the next: see :mod:`workers.batchjudge.submitter` and :mod:`workers.batchjudge.collector`.

For tests, :data:`KILL_AT_ENV` names a step (:data:`~workers.batchjudge.submitter.STEPS`
or :data:`~workers.batchjudge.collector.STEPS`) at which the process SIGKILLs itself,
read once when the round's parts are built; unset, no hook is installed.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import redis
from celery import Celery

from evalfleet.broker.beat import schedule_round
from evalfleet.core.budget import budget_day
from evalfleet.core.message import Job
from evalfleet.core.price import cost_usd
from evalfleet.core.settings import Settings
from evalfleet.core.spend import SpendLedger
from evalfleet.core.tokens import prompt_tokens
from evalfleet.store.queries.batchspool import BatchSpool
from workers.batchjudge.api import BatchApi
from workers.batchjudge.collector import Collector, collecting_evaluator
from workers.batchjudge.submitter import BatchLimits, Submitter
from workers.judge.registry import batch_dialect
from workers.runtime import Runtime

logger = logging.getLogger(__name__)

#: The Redis key of the fleet's batch lock.
LOCK_KEY = "evalfleet:batch:round"

#: Shortest life of the batch lock, in seconds (renewed every third of it).
LOCK_MIN_TTL_S = 3.0

#: Names the step at which a test's beat SIGKILLs itself.
KILL_AT_ENV = "EVALFLEET_TEST_KILL_AT"

#: The Batch API's base URL when the settings name no judge endpoint.
DEFAULT_BASE_URL = "https://api.openai.com/v1"


def batch_api(settings: Settings) -> BatchApi:
    """The Batch API the settings name (``batch_*``, else the judge endpoint's)."""
    judge = settings.judge
    secret = judge.batch_api_key or judge.openai_api_key
    return BatchApi(judge.batch_base_url or judge.openai_base_url or DEFAULT_BASE_URL,
                    api_key=secret.get_secret_value() if secret else None,
                    timeout_s=max(60.0, settings.judge.judge_timeout_s),
                    dialect=batch_dialect(settings.judge.batch_flavor,
                                          api_version=settings.judge.batch_api_version))


def lock_ttl_s(poll_s: float) -> float:
    """How long the batch lock lives unless renewed: two rounds' interval, at least
    :data:`LOCK_MIN_TTL_S`."""
    return max(LOCK_MIN_TTL_S, 2 * poll_s)


def kill_at(step: str | None) -> Callable[[str], None] | None:
    """A step hook that SIGKILLs this process at ``step`` (None when ``step`` is unset)."""
    if not step:
        return None

    def maybe_die(name: str) -> None:
        if name == step:
            logger.warning("%s=%s: killing this process", KILL_AT_ENV, step)
            os.kill(os.getpid(), signal.SIGKILL)

    return maybe_die


def estimator(settings: Settings) -> Callable[[Sequence[tuple[str, dict[str, Any]]]],
                                              dict[str, float]]:
    """A batch's estimated cost per metric at the batch price: the prompt's tokens as the
    rate limiter estimates them (``evalfleet.core.tokens``), and every line's ``max_tokens``
    as its completion (an upper bound: the budget errs towards stopping early)."""
    prices = settings.judge.resolved_model_prices()

    def estimate(lines: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, float]:
        costs: dict[str, float] = {}
        for metric, body in lines:
            price = prices.get(str(body.get("model")))
            if price is None:
                continue
            messages = body.get("messages")
            prompt = prompt_tokens(m for m in messages if isinstance(m, dict)) \
                if isinstance(messages, list) else 0
            max_tokens = body.get("max_tokens")
            completion = max_tokens if isinstance(max_tokens, int) else 0
            usd = cost_usd(price, prompt_tokens=prompt, completion_tokens=completion, batch=True)
            costs[metric] = costs.get(metric, 0.0) + (usd or 0.0)
        return costs

    return estimate


class BatchRounds:
    """The submitter and the collector of one process, built on first use.

    Args:
        settings: The settings.
        runtime: Gives the worker's evaluator and store (built on first use).
        publish: Sends a job back to its queue after a countdown in seconds.
    """

    def __init__(self, settings: Settings, *, runtime: Callable[[], Runtime],
                 publish: Callable[[Job, float], None]) -> None:
        self.settings = settings
        self._runtime = runtime
        self._publish = publish
        self._built: tuple[Submitter, Collector] | None = None
        # A Batch API dialect the registry lacks stops the beat now, not at its first round.
        batch_dialect(settings.judge.batch_flavor, api_version=settings.judge.batch_api_version)
        self._guard = threading.Lock()
        shared = settings.resolved_shared_redis_url()
        self._redis = redis.Redis.from_url(shared) if shared else None
        self._spend = SpendLedger(shared) if shared else None

    def run(self) -> str:
        """One round, unless another beat holds the fleet's batch lock.

        Returns:
            What it did, for the log.
        """
        ttl_s = lock_ttl_s(self.settings.judge.batch_poll_s)
        # Not thread-local: the renewing thread must see the token.
        lock = (self._redis.lock(LOCK_KEY, timeout=ttl_s, thread_local=False)
                if self._redis is not None else None)
        if lock is not None and not lock.acquire(blocking=False):
            return "another beat runs the batch round"
        done = threading.Event()
        if lock is not None:
            threading.Thread(target=_renew, args=(lock, ttl_s / 3, done), daemon=True,
                             name="batch-lock").start()
        try:
            with self._guard:
                submitter, collector = self._parts()
                sent = submitter.run()
                report = collector.run()
        finally:
            done.set()
            if lock is not None and lock.owned():
                lock.release()
        return (f"{sent} request(s) sent; {report.batches_finished} batch(es) collected "
                f"({report.outcomes}), {report.batches_given_back} given back")

    def _parts(self) -> tuple[Submitter, Collector]:
        if self._built is None:
            runtime = self._runtime()
            spool = BatchSpool(runtime.store)  # type: ignore[arg-type]
            api = batch_api(self.settings)
            step = kill_at(os.environ.get(KILL_AT_ENV))
            evaluator, answers = collecting_evaluator(
                runtime.evaluator, endpoint=api.base_url,
                reask_sync=self.settings.judge.batch_reask_sync)
            submitter = Submitter(
                spool, api, BatchLimits(self.settings.judge.batch_max_requests,
                                        self.settings.judge.batch_max_file_bytes,
                                        self.settings.judge.batch_max_wait_s),
                clock=_now, estimate=estimator(self.settings), spend=self._count_spend,
                step=step)
            collector = Collector(spool, api, evaluator=evaluator, answers=answers,
                                  publish=self._publish, clock=_now,
                                  failed_retry_s=self.settings.judge.batch_failed_retry_s,
                                  prices=self.settings.judge.resolved_model_prices(),
                                  step=step)
            self._built = (submitter, collector)
        return self._built

    def _count_spend(self, costs: dict[str, float]) -> None:
        if self._spend is None:
            return
        try:
            self._spend.add(costs, day=budget_day())
        except Exception as exc:  # the batch is sent; a budget counter may lag
            logger.warning("cannot count a batch's estimated spend: %s", exc)


def _renew(lock: redis.lock.Lock, every_s: float, done: threading.Event) -> None:
    while not done.wait(every_s):
        try:
            lock.reacquire()
        except Exception as exc:  # lost or Redis away: the round goes on, unguarded
            logger.warning("cannot renew the batch lock: %s", exc)
            return


def _now() -> datetime:
    return datetime.now(UTC)

#: The batch round's task name and beat schedule entry.
BATCH_TASK = "evalfleet.batch_round"


def register_batch_beat(app: Celery, settings: Settings, *, rounds: BatchRounds,
                        queue: str) -> None:
    """Register the batch round on ``app`` and schedule it every ``batch_poll_s`` on
    ``queue`` (the beat's own)."""

    @app.task(name=BATCH_TASK, shared=False, ignore_result=True, acks_late=False)
    def batch_round() -> str:
        """Submit due batch-mode jobs and collect finished batches."""
        return rounds.run()

    schedule_round(app, entry=BATCH_TASK, task=BATCH_TASK, every_s=settings.judge.batch_poll_s,
                   queue=queue)
