"""What a worker process builds once and every task reuses: registry, store, judge.

Built lazily on the first task, so it is created after any fork and never at
import time.
"""

from __future__ import annotations

import gc
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from evalfleet.core.metric import load_registry
from evalfleet.core.settings import Settings
from evalfleet.core.spend import SpendLedger
from evalfleet.store import VerdictStore, open_store
from workers.evaluation import Evaluator, EvaluatorOptions
from workers.judge import AsyncHttpJudge, JudgeClient, JudgeRunner, OpenAIJudge
from workers.judge.formats import FormatSupport, RedisFormatSupport
from workers.judge.gate import PacedJudge, Pacing
from workers.limiter import LocalRateLimiter, RateLimiter, RedisRateLimiter
from workers.limiter.redis import MAX_CONNECTIONS as LIMITER_MAX_CONNECTIONS
from workers.renderer import check_templates
from workers.telemetry import configure_telemetry

#: Container allocations between young garbage collections in a worker process
#: (Python's default is 700); see :func:`tune_collector`.
YOUNG_COLLECTION_THRESHOLD = 20_000


@dataclass
class Runtime:
    """The long-lived objects of one worker process."""

    evaluator: Evaluator
    store: VerdictStore
    paused_until: dict[str, float] = field(default_factory=dict)
    """Queues this process stopped consuming, and until when (monotonic seconds)."""
    lock: threading.Lock = field(default_factory=threading.Lock)


def build_runtime(settings: Settings, *, concurrency: int) -> Runtime:
    """Load metrics, open the store and the judge client for one process.

    Raises:
        InvalidMetricSpec: When a metric file is broken (the worker must not start).
    """
    registry = load_registry(settings.metrics_dir)
    for metric in registry:
        check_templates(metric)
    # Only task threads use the database, one transaction at a time each. The review
    # slice is queued in the transaction that stores the verdicts.
    store = open_store(settings.resolved_database_url(),
                       pool_size=task_slots(settings, concurrency=concurrency),
                       review=settings.review.review_slice())
    telemetry = configure_telemetry(segment_keys=settings.metrics_segment_keys,
                                    max_segment_values=settings.metrics_max_segment_values)
    judge = build_judge(settings, concurrency=concurrency,
                        on_wait=lambda metric, wait_s: telemetry.record_limiter_wait(
                            metric=metric, wait_s=wait_s))
    options = EvaluatorOptions.from_settings(settings)
    shared = settings.resolved_shared_redis_url()
    spend = SpendLedger(shared) if shared else None
    formats = (RedisFormatSupport(settings.judge_response_format, url=shared,
                                  endpoint=settings.openai_base_url)
               if shared else FormatSupport(settings.judge_response_format))
    evaluator = Evaluator(registry=registry, store=store, judge=judge, options=options,
                          spend=spend, telemetry=telemetry, formats=formats)
    return Runtime(evaluator=evaluator, store=store)


def task_slots(settings: Settings, *, concurrency: int) -> int:
    """Celery threads for ``concurrency`` judge calls in flight.

    With the HTTP runner a task thread only waits for its batch, so two batches'
    worth of threads per judge slot keeps the slots busy while batches finish;
    with the openai client each thread makes one call at a time.
    """
    if settings.judge_client == "openai":
        return concurrency
    return max(2, 2 * math.ceil(concurrency / settings.batch_size))


def build_judge(settings: Settings, *, concurrency: int,
                on_wait: Callable[[str, float], None] | None = None) -> JudgeClient:
    """The judge client the settings ask for: the lean HTTP runner, or the openai client."""
    api_key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
    pacing = Pacing(limiter=build_limiter(settings, concurrency=concurrency),
                    max_wait_s=settings.rate_limit_max_wait_s,
                    budget_for=settings.rate_limit_for, on_wait=on_wait)
    if settings.judge_client == "openai":
        blocking = OpenAIJudge(base_url=settings.openai_base_url, api_key=api_key,
                               timeout_s=settings.judge_timeout_s,
                               max_reply_bytes=settings.judge_max_reply_bytes)
        return PacedJudge(blocking, endpoint=blocking.endpoint, pacing=pacing)
    client = AsyncHttpJudge(base_url=settings.openai_base_url, api_key=api_key,
                            timeout_s=settings.judge_timeout_s, max_connections=concurrency,
                            max_reply_bytes=settings.judge_max_reply_bytes)
    return JudgeRunner(client, concurrency=concurrency, pacing=pacing)


def build_limiter(settings: Settings, *, concurrency: int) -> RateLimiter | None:
    """The fleet's shared limiter in Redis, else one for this process; None without limits.

    Args:
        settings: The settings.
        concurrency: Judge calls in flight in this process; the limiter's Redis pool
            never holds more connections than that.
    """
    if not (settings.judge_rpm or settings.judge_tpm or settings.judge_rate_limits):
        return None
    url = settings.resolved_shared_redis_url()
    if not url:
        return LocalRateLimiter()
    return RedisRateLimiter(url, max_connections=min(concurrency, LIMITER_MAX_CONNECTIONS))


class LazyRuntime:
    """Builds the :class:`Runtime` on first use, once per process, thread-safely."""

    def __init__(self, settings: Settings, *, concurrency: int) -> None:
        self._settings = settings
        self._concurrency = concurrency
        self._runtime: Runtime | None = None
        self._lock = threading.Lock()

    def get(self) -> Runtime:
        """The runtime, built on the first call."""
        if self._runtime is None:
            with self._lock:
                if self._runtime is None:
                    self._runtime = build_runtime(self._settings, concurrency=self._concurrency)
        return self._runtime


def tune_collector() -> None:
    """Fit the garbage collector to a worker process, once it has started.

    What the worker loaded to start (about 200,000 objects: modules, Celery, models)
    lives as long as the process: frozen, no collection walks it again. And the calls
    in flight keep many young objects alive for a judge's latency, so at Python's
    default threshold every young collection walked and promoted them. The collector
    took about 17% of a worker's CPU at C = 256, 9% with the freeze alone and 2% with
    both (docs/performance.md, (a3)).
    """
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, *gc.get_threshold()[1:])
