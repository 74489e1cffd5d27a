"""The producer's parts, built once from the settings: the one place that picks
implementations by broker (Redis or not) and wires them together.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from evalfleet.broker.depth import (
    AmqpQueueDepth,
    CachedQueueDepth,
    FilesystemQueueDepth,
    QueueDepth,
    RedisQueueDepth,
    UnknownQueueDepth,
)
from evalfleet.broker.queues import embedded_broker_folder, is_amqp, is_redis
from evalfleet.core.message import queue_for
from evalfleet.core.metric import MetricRegistry, load_registry
from evalfleet.core.settings import Settings
from evalfleet.core.spend import SpendLedger
from producers import telemetry
from producers.budget import BudgetGate
from producers.dedupe import Deduper, MemoryDeduper, RedisDeduper
from producers.dispatcher import Dispatcher
from producers.enqueuer import Enqueuer
from producers.limits import FieldLimits
from producers.pipeline import Pipeline
from producers.policy import Fallbacks, max_delay_for
from producers.quota import SegmentQuota
from producers.reloader import PolicyReloader
from producers.screen import Screen
from producers.traces.assembly import TraceAssembly
from producers.traces.buffer import MemoryTraceBuffer, RedisTraceBuffer, Timing, TraceBuffer
from producers.traces.session_assembly import SessionAssembly
from producers.traces.sessions import (
    MemorySessionBuffer,
    RedisSessionBuffer,
    SessionBuffer,
    SessionTiming,
)


class ProducerRuntime:
    """Everything a producer needs: metrics, policy, screen, dispatcher, enqueuer."""

    def __init__(self, settings: Settings, *, sampling_config: Path | None = None,
                 shared_dedupe: bool = True, registry: MetricRegistry | None = None) -> None:
        """Build the parts.

        Args:
            settings: The settings.
            sampling_config: The sampling config file; None uses ``settings.sampling_config``.
            shared_dedupe: Deduplicate through Redis across producers (when the broker is
                Redis); False keeps the window in this process only.
            registry: Metric definitions; loaded from the settings when None.

        Raises:
            InvalidSamplingConfig: When the sampling config is invalid.
            InvalidMetricSpec: When a metric file is invalid.
        """
        self.settings = settings
        self.registry = registry or load_registry(settings.judge.metrics_dir)
        self.reloader = PolicyReloader(
            sampling_config or settings.limits.sampling_config,
            fallbacks=Fallbacks.from_settings(settings), max_delay_s=max_delay_for(settings),
            known_metrics=self.registry.names(),
            on_reload=lambda result: telemetry.POLICY_RELOADS.labels(result).inc(),
        )
        self._redis_clients: dict[str, redis.Redis] = {}
        shared_url = settings.resolved_shared_redis_url()
        self._shared = self._redis_at(shared_url) if shared_url else None
        self._depth_probe = self._queue_depth()
        checks = self.registry.check_names()
        self.enqueuer = Enqueuer(settings, check_metrics=checks)
        self.screen = Screen(
            metrics={metric.name: metric for metric in self.registry},
            limits=FieldLimits.from_settings(settings),
            quota=SegmentQuota(max_tracked=self.reloader.current().spec.segments.max_tracked),
        )
        self.dispatcher = Dispatcher(publisher=self.enqueuer,
                                     deduper=self._deduper(shared=shared_dedupe),
                                     depth=CachedQueueDepth(
                                         self._depth_probe,
                                         jobs_per_message=settings.broker.batch_size,
                                         jobs_per_queue={
                                             queue_for(name): settings.broker.check_batch_size
                                             for name in checks}),
                                     budget=self._budget_gate(),
                                     shadows=settings.judge.shadow_judges)

    def _budget_gate(self) -> BudgetGate | None:
        """Daily budgets, read from the spend the workers count in Redis."""
        shared_url = self.settings.resolved_shared_redis_url()
        if not self.settings.judge.daily_budgets_usd or shared_url is None:
            return None
        return BudgetGate(ledger=SpendLedger(shared_url),
                          budgets_usd=self.settings.judge.daily_budgets_usd,
                          soft_fraction=self.settings.judge.budget_soft_fraction)

    def pipeline(self, *, metrics: Sequence[str] | None, rate: float | None,
                 source: str) -> Pipeline:
        """A pipeline over this runtime's parts.

        Args:
            metrics: The metrics to produce for; None for those the policy lists.
            rate: A rate overriding the policy's.
            source: Telemetry label of the source.
        """
        return Pipeline(screen=self.screen, dispatcher=self.dispatcher,
                        policy=self.reloader.current, metrics=metrics, rate=rate,
                        source=source)

    def trace_buffer(self, *, shared: bool = True) -> TraceBuffer:
        """Where traces are assembled: the shared Redis when there is one (and
        ``shared``), so every replica sees every span; else this process's memory."""
        settings = self.settings
        timing = Timing(quiet_s=settings.ingest.otlp_quiet_s,
                        max_wait_s=settings.ingest.otlp_max_wait_s,
                        agent_max_wait_s=settings.ingest.otlp_agent_max_wait_s,
                        max_spans_per_trace=settings.ingest.otlp_max_spans_per_trace,
                        max_trace_bytes=settings.ingest.otlp_max_trace_bytes,
                        max_open_traces=settings.ingest.otlp_max_open_traces)
        if shared and self._shared is not None:
            return RedisTraceBuffer(self._shared, timing=timing)
        return MemoryTraceBuffer(timing=timing)

    def session_buffer(self, *, shared: bool = True) -> SessionBuffer:
        """Where conversations wait to go quiet: beside the trace buffer (the shared
        Redis when there is one, and ``shared``; else this process's memory)."""
        settings = self.settings
        timing = SessionTiming(idle_s=settings.ingest.otlp_session_idle_s,
                               final_s=settings.ingest.otlp_session_final_s,
                               max_age_s=settings.ingest.otlp_session_max_age_s,
                               max_open_sessions=settings.ingest.otlp_max_open_sessions,
                               max_turns_per_session=settings.ingest.otlp_max_turns_per_session,
                               max_session_bytes=settings.ingest.otlp_max_session_bytes)
        if shared and self._shared is not None:
            return RedisSessionBuffer(self._shared, timing=timing)
        return MemorySessionBuffer(timing=timing)

    def trace_assembly(self, buffer: TraceBuffer, *, metrics: Sequence[str] | None,
                       rate: float | None) -> TraceAssembly:
        """Traces from ``buffer`` through a pipeline over this runtime's parts, each
        offered as a turn to its session (kept where ``buffer`` is: in Redis or memory).

        Args:
            buffer: Where spans wait for their trace.
            metrics: The metrics to produce for; None for those the policy lists.
            rate: A rate overriding the policy's.
        """
        pipeline = self.pipeline(metrics=metrics, rate=rate, source="otlp")
        by_name = {m.name: m for m in self.registry}
        sessions = SessionAssembly(
            buffer=self.session_buffer(shared=isinstance(buffer, RedisTraceBuffer)),
            pipeline=pipeline, metrics=by_name)
        return TraceAssembly(buffer=buffer, metrics=by_name, pipeline=pipeline,
                             sessions=sessions)

    def close(self) -> None:
        """Close broker and Redis connections."""
        self.enqueuer.close()
        self._depth_probe.close()
        for client in self._redis_clients.values():
            client.close()

    def _deduper(self, *, shared: bool) -> Deduper:
        window_s = self.settings.limits.dedupe_window_s
        if shared and self._shared is not None and window_s > 0:
            return RedisDeduper(self._shared, window_s=window_s)
        return MemoryDeduper(window_s=window_s, max_keys=self.settings.limits.dedupe_memory_ids)

    def _queue_depth(self) -> QueueDepth:
        broker_url = self.settings.resolved_broker_url()
        if is_redis(self.settings):
            return RedisQueueDepth(self._redis_at(broker_url))
        if is_amqp(self.settings):
            return AmqpQueueDepth(broker_url,
                                  timeout_s=self.settings.limits.producer_broker_timeout_s)
        if self.settings.embedded_broker:
            return FilesystemQueueDepth(embedded_broker_folder(self.settings) / "queue")
        return UnknownQueueDepth()

    def _redis_at(self, url: str) -> redis.Redis:
        """One client per Redis (the broker's and the shared one are often the same).

        One quick retry (a pooled connection may have gone stale), not redis-py's default
        of several seconds of backoff: a producer must notice an outage at once.
        """
        if url not in self._redis_clients:
            timeout_s = self.settings.limits.producer_broker_timeout_s
            self._redis_clients[url] = redis.Redis.from_url(
                url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                retry=Retry(ExponentialBackoff(cap=0.2, base=0.05), 1))
        return self._redis_clients[url]
