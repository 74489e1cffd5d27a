"""What a worker process builds once and every task reuses: registry, store, judge.

Built lazily on the first task, so it is created after any fork and never at
import time.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from evalfleet.core.endpoint import JudgeEndpoint
from evalfleet.core.errors import InvalidMetricSpec
from evalfleet.core.metric import MetricRegistry, load_registry
from evalfleet.core.ratelimit import RateLimit
from evalfleet.core.settings import Settings
from evalfleet.core.spend import SpendLedger
from evalfleet.store import SqlStore, VerdictStore, open_store
from evalfleet.store.queries.batchspool import BatchSpool
from evalfleet.store.queries.cascade import ThresholdBook
from workers.batchjudge.mode import SpoolingMode
from workers.cascade import ThresholdCache
from workers.evaluation import Evaluator, EvaluatorOptions
from workers.judge import JudgeFleet, JudgeProvider, Pacing
from workers.judge.cache_key import CacheKeySupport, RedisCacheKeySupport
from workers.judge.fleet import Endpoint
from workers.judge.formats import FormatSupport, RedisFormatSupport
from workers.judge.gate import LEASE_MARGIN_S, InFlightCap
from workers.judge.registry import ProviderConfig, judge_client
from workers.limiter import LocalRateLimiter, RateLimiter, RedisRateLimiter
from workers.limiter.redis import MAX_CONNECTIONS as LIMITER_MAX_CONNECTIONS
from workers.limiter.slots import LocalSlots, RedisSlots, Slots
from workers.renderer import check_templates
from workers.shutdown import ShutdownDeadline
from workers.telemetry import Telemetry, configure_telemetry


@dataclass
class Runtime:
    """The long-lived objects of one worker process."""

    evaluator: Evaluator
    store: VerdictStore
    paused_until: dict[str, float] = field(default_factory=dict)
    """Queues this process stopped consuming, and until when (monotonic seconds)."""
    lock: threading.Lock = field(default_factory=threading.Lock)


def build_runtime(settings: Settings, *, concurrency: int,
                  deadline: ShutdownDeadline | None = None) -> Runtime:
    """Load metrics, open the store and the judge for one process.

    Args:
        settings: The settings.
        concurrency: Judge calls in flight in this process.
        deadline: The worker's shutdown deadline its judge calls give up at.

    Raises:
        InvalidMetricSpec: When a metric file is broken (the worker must not start).
    """
    registry = load_registry(settings.judge.metrics_dir)
    for metric in registry:
        check_templates(metric)
    check_endpoints(registry, settings)
    # Only task threads use the database, one transaction at a time each. The review
    # slice is queued in the transaction that stores the verdicts.
    store = open_store(settings.resolved_database_url(),
                       pool_size=task_slots(settings, concurrency=concurrency),
                       review=settings.review.review_slice())
    telemetry = configure_telemetry(segment_keys=settings.worker.metrics_segment_keys,
                                    max_segment_values=settings.worker.metrics_max_segment_values)
    judge = build_judge(settings, concurrency=concurrency, telemetry=telemetry,
                        deadline=deadline)
    options = EvaluatorOptions.from_settings(settings)
    shared = settings.resolved_shared_redis_url()
    spend = SpendLedger(shared) if shared else None
    batch = (SpoolingMode(BatchSpool(store), formats=judge.formats)
             if isinstance(store, SqlStore) else None)
    thresholds = (ThresholdCache(ThresholdBook(store).latest)
                  if isinstance(store, SqlStore) else None)
    evaluator = Evaluator(registry=registry, store=store, judge=judge, options=options,
                          spend=spend, telemetry=telemetry, batch=batch, thresholds=thresholds)
    return Runtime(evaluator=evaluator, store=store)


def check_endpoints(registry: MetricRegistry, settings: Settings) -> None:
    """Refuse to start when a cascade tier names an endpoint the settings lack.

    Raises:
        InvalidMetricSpec: Naming the metric file, the tier and the endpoints there are.
    """
    for metric in registry:
        for number, tier in enumerate(metric.spec.judge.cascade, start=1):
            if tier.endpoint is not None and tier.endpoint not in settings.judge.judge_endpoints:
                known = ", ".join(sorted(settings.judge.judge_endpoints)) or "none"
                raise InvalidMetricSpec(
                    f"judge.cascade[{number}] names endpoint {tier.endpoint!r}, which "
                    f"EVALFLEET_JUDGE_ENDPOINTS does not define (defined: {known})",
                    path=metric.path)


def task_slots(settings: Settings, *, concurrency: int) -> int:
    """Celery threads for ``concurrency`` judge calls in flight.

    Whichever provider the judge uses, its calls run on the fleet's loop and a task
    thread only waits for its batch, so two batches' worth of threads per judge slot
    keeps the slots busy while batches finish.
    """
    return max(2, 2 * math.ceil(concurrency / settings.broker.batch_size))


def build_provider(settings: Settings, *, concurrency: int,
                   endpoint: JudgeEndpoint | None = None) -> JudgeProvider:
    """The judge provider ``EVALFLEET_JUDGE_CLIENT`` names (:mod:`workers.judge.registry`),
    for the fleet's judge or for a named ``endpoint``.

    Raises:
        UnknownProvider: The registry knows no provider of that name.
    """
    if endpoint is None:
        base_url = settings.judge.openai_base_url
        api_key = (settings.judge.openai_api_key.get_secret_value() if settings.judge.openai_api_key
                   else None)
    else:
        base_url, api_key = endpoint.base_url, endpoint.api_key()
    return judge_client(settings.judge.judge_client)(ProviderConfig(
        base_url=base_url, api_key=api_key, timeout_s=settings.judge.judge_timeout_s,
        max_connections=concurrency, max_reply_bytes=settings.judge.judge_max_reply_bytes))


def build_probe_fleet(settings: Settings, *, formats: FormatSupport | None = None,
                      cache_keys: CacheKeySupport | None = None) -> JudgeFleet:
    """A fleet of one call at a time around the settings' judge and each named endpoint,
    for probes (``evalfleet judge check``, readiness): the worker's providers, URLs and
    credentials, with what it learns kept in this process (no rate budget: a probe is a
    handful of calls).

    Args:
        settings: The settings.
        formats: What its step-down learns (a fresh one from the configured mode).
        cache_keys: What its ``prompt_cache_key`` drop learns (a fresh one).
    """
    endpoints = {name: Endpoint(build_provider(settings, concurrency=1, endpoint=named))
                 for name, named in settings.judge.judge_endpoints.items()}
    return JudgeFleet(build_provider(settings, concurrency=1), concurrency=1,
                      formats=formats or FormatSupport(settings.judge.judge_response_format),
                      cache_keys=cache_keys, endpoints=endpoints)


def build_judge(settings: Settings, *, concurrency: int, telemetry: Telemetry | None = None,
                deadline: ShutdownDeadline | None = None) -> JudgeFleet:
    """The worker's judge: the settings' provider inside the fleet's concerns.

    Args:
        settings: The settings.
        concurrency: Judge calls in flight in this process.
        telemetry: Told rate-budget waits and format step-downs.
        deadline: The worker's shutdown deadline.
    """
    on_wait: Callable[[str, float], None] | None = None
    on_step_down: Callable[[str, str], None] | None = None
    if telemetry is not None:
        def on_wait(metric: str, wait_s: float) -> None:
            telemetry.record_limiter_wait(metric=metric, wait_s=wait_s)

        def on_step_down(model: str, mode: str) -> None:
            telemetry.record_format_step_down(judge_model=model, mode=mode)

    limiter = build_limiter(settings, concurrency=concurrency)
    slots = build_slots(settings, concurrency=concurrency)

    def pacing(budget_for: Callable[[str], RateLimit]) -> Pacing:
        return Pacing(limiter=limiter, max_wait_s=settings.judge.rate_limit_max_wait_s,
                      budget_for=budget_for, on_wait=on_wait)

    def cap(most: int | None) -> InFlightCap:
        return InFlightCap(slots=slots, limit_for=lambda model: most,
                           lease_s=settings.judge.judge_timeout_s + LEASE_MARGIN_S,
                           max_wait_s=settings.judge.slot_max_wait_s,
                           adaptive_max=((most or concurrency)
                                         if settings.judge.judge_adaptive_in_flight else None))

    endpoints = {name: Endpoint(
        build_provider(settings, concurrency=concurrency, endpoint=named),
        pacing=pacing(functools.partial(endpoint_rate_limit, settings, named)),
        cap=cap(named.max_in_flight or settings.judge.judge_max_in_flight),
        formats=build_formats(settings, url=named.base_url),
        cache_keys=build_cache_keys(settings, url=named.base_url))
        for name, named in settings.judge.judge_endpoints.items()}
    return JudgeFleet(build_provider(settings, concurrency=concurrency),
                      concurrency=concurrency, pacing=pacing(settings.rate_limit_for),
                      formats=build_formats(settings, url=settings.judge.openai_base_url),
                      deadline=deadline, on_step_down=on_step_down,
                      cap=cap(settings.judge.judge_max_in_flight),
                      cache_keys=build_cache_keys(settings, url=settings.judge.openai_base_url),
                      endpoints=endpoints)


def endpoint_rate_limit(settings: Settings, endpoint: JudgeEndpoint, model: str) -> RateLimit:
    """A named endpoint's rate limits for ``model``: its own, else the fleet's."""
    fleet = settings.rate_limit_for(model)
    return RateLimit(requests_per_minute=endpoint.rpm or fleet.requests_per_minute,
                     tokens_per_minute=endpoint.tpm or fleet.tokens_per_minute)


def build_slots(settings: Settings, *, concurrency: int) -> Slots | None:
    """The fleet's slots for calls in flight in Redis, else this process's; None without
    a cap."""
    if settings.judge.judge_max_in_flight is None and not settings.judge.judge_adaptive_in_flight:
        return None
    url = settings.resolved_shared_redis_url()
    if not url:
        return LocalSlots()
    return RedisSlots(url, max_connections=min(concurrency, LIMITER_MAX_CONNECTIONS))


def build_formats(settings: Settings, *, url: str | None) -> FormatSupport:
    """The response formats the models of the judge endpoint at ``url`` accept: shared by
    the fleet in Redis when there is one, else learnt by this process alone."""
    shared = settings.resolved_shared_redis_url()
    if shared:
        return RedisFormatSupport(settings.judge.judge_response_format, url=shared, endpoint=url)
    return FormatSupport(settings.judge.judge_response_format)


def build_cache_keys(settings: Settings, *, url: str | None) -> CacheKeySupport:
    """The models of the judge endpoint at ``url`` that refuse ``prompt_cache_key``: shared
    by the fleet in Redis when there is one, else learnt by this process alone."""
    shared = settings.resolved_shared_redis_url()
    if shared:
        return RedisCacheKeySupport(url=shared, endpoint=url)
    return CacheKeySupport()


def build_limiter(settings: Settings, *, concurrency: int) -> RateLimiter | None:
    """The fleet's shared limiter in Redis, else one for this process; None without limits.

    Args:
        settings: The settings.
        concurrency: Judge calls in flight in this process; the limiter's Redis pool
            never holds more connections than that.
    """
    judge = settings.judge
    if not (judge.judge_rpm or judge.judge_tpm or judge.judge_rate_limits):
        return None
    url = settings.resolved_shared_redis_url()
    if not url:
        return LocalRateLimiter()
    return RedisRateLimiter(url, max_connections=min(concurrency, LIMITER_MAX_CONNECTIONS))


class LazyRuntime:
    """Builds the :class:`Runtime` on first use, once per process, thread-safely."""

    def __init__(self, settings: Settings, *, concurrency: int,
                 deadline: ShutdownDeadline | None = None) -> None:
        self._settings = settings
        self._concurrency = concurrency
        self._deadline = deadline
        self._runtime: Runtime | None = None
        self._lock = threading.Lock()

    def get(self) -> Runtime:
        """The runtime, built on the first call."""
        if self._runtime is None:
            with self._lock:
                if self._runtime is None:
                    self._runtime = build_runtime(self._settings, concurrency=self._concurrency,
                                                  deadline=self._deadline)
        return self._runtime
