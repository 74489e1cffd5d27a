"""Prometheus metrics of the worker fleet, and the HTTP endpoint that serves them.

The worker calls small ``record_*`` functions with plain data; this module
owns the metric objects. Label cardinality is bounded: segment labels exist
only for the attribute keys configured (``EVALFLEET_METRICS_SEGMENT_KEYS``), and
each keeps at most ``EVALFLEET_METRICS_MAX_SEGMENT_VALUES`` distinct values per
process, later ones counted as ``other``.

Metrics (all prefixed ``evalfleet_``):

- ``verdicts_total{metric, status, error_class, <segment keys>}``
- ``verdict_score{metric, score, <segment keys>}`` (histogram of 0..1 scores)
- ``sample_to_verdict_lag_seconds{metric}`` (histogram: sample time to stored verdict)
- ``judge_errors_total{metric, error_class}``
- ``rate_limiter_wait_seconds{metric}`` (histogram)
- ``judge_tokens_total{metric, model, kind}`` and ``judge_cost_usd_total{metric, model}``
- ``queue_depth{queue}`` and ``unacked_jobs`` (read from Redis at scrape time)
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from evalfleet.broker.redis_keys import UNACKED_KEY, waiting_messages

logger = logging.getLogger(__name__)

#: Value of a segment label once its key has seen too many distinct values.
OTHER = "other"

#: Longest segment label value kept, in characters.
MAX_LABEL_VALUE_CHARS = 64

#: Score histogram buckets (scores are 0..1).
SCORE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)

#: Lag buckets, in seconds: from a second to a day.
LAG_BUCKETS_S = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)

#: Rate-limiter wait buckets, in seconds.
WAIT_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

#: Label names the metrics use themselves; segment keys may not take them.
_RESERVED = frozenset({"metric", "status", "error_class", "score", "model", "kind", "queue",
                       "le", "quantile", "job", "instance"})
_LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SegmentLabeler:
    """Turns sample attributes into bounded label values.

    Args:
        keys: The attribute keys that become labels.
        max_values: Distinct values kept per key; later values become ``other``.

    Raises:
        ValueError: When a key is not a valid label name or clashes with a metric's own.
    """

    def __init__(self, keys: Sequence[str], *, max_values: int) -> None:
        for key in keys:
            if not _LABEL_NAME.match(key) or key in _RESERVED:
                raise ValueError(f"segment key {key!r} cannot be a Prometheus label")
        self.keys = tuple(keys)
        self._max_values = max_values
        self._seen: dict[str, set[str]] = {key: set() for key in keys}
        self._lock = threading.Lock()

    def values(self, attributes: Mapping[str, Any]) -> list[str]:
        """One label value per key, in key order (``""`` when the attribute is missing)."""
        return [self._value(key, attributes.get(key)) for key in self.keys]

    def _value(self, key: str, raw: Any) -> str:
        if raw is None:
            return ""
        value = str(raw)[:MAX_LABEL_VALUE_CHARS]
        seen = self._seen[key]
        if value in seen:
            return value
        with self._lock:
            if len(seen) >= self._max_values:
                return OTHER
            seen.add(value)
        return value


class Telemetry:
    """The worker's metric objects, registered on one registry.

    Args:
        registry: Where the metrics are registered.
        segment_keys: Attribute keys that become labels.
        max_segment_values: Distinct values kept per key.
    """

    def __init__(
        self, *, registry: CollectorRegistry = REGISTRY, segment_keys: Sequence[str] = ("app",),
        max_segment_values: int = 50,
    ) -> None:
        self.labeler = SegmentLabeler(segment_keys, max_values=max_segment_values)
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        segments = list(self.labeler.keys)
        self.verdicts = Counter(
            "evalfleet_verdicts", "Verdicts stored, by outcome and segment.",
            ["metric", "status", "error_class", *segments], registry=registry)
        self.scores = Histogram(
            "evalfleet_verdict_score", "Scores of stored verdicts (0..1).",
            ["metric", "score", *segments], buckets=SCORE_BUCKETS, registry=registry)
        self.lag = Histogram(
            "evalfleet_sample_to_verdict_lag_seconds",
            "Time from the sample's timestamp to its stored verdict.",
            ["metric"], buckets=LAG_BUCKETS_S, registry=registry)
        self.judge_errors = Counter(
            "evalfleet_judge_errors", "Judge failures by class (transport, parse, rejection).",
            ["metric", "error_class"], registry=registry)
        self.format_step_downs = Counter(
            "evalfleet_judge_format_step_downs",
            "Times a judge model refused a response_format and the worker stepped down.",
            ["model", "mode"], registry=registry)
        self.identity_changes = Counter(
            "evalfleet_judge_identity_changes",
            "Times a judge model's reported model or system_fingerprint changed.",
            ["model"], registry=registry)
        self.limiter_wait = Histogram(
            "evalfleet_rate_limiter_wait_seconds", "Time a job waited for the rate limiter.",
            ["metric"], buckets=WAIT_BUCKETS_S, registry=registry)
        self.tokens = Counter(
            "evalfleet_judge_tokens", "Judge tokens used.", ["metric", "model", "kind"],
            registry=registry)
        self.cached_tokens = Counter(
            "evalfleet_judge_cached_prompt_tokens",
            "Prompt tokens the judge served from its prompt cache (part of "
            "evalfleet_judge_tokens{kind=\"prompt\"}; the ratio is the cached share).",
            ["metric", "model"], registry=registry)
        self.cost = Counter(
            "evalfleet_judge_cost_usd",
            "Judge cost in US dollars (priced by EVALFLEET_MODEL_PRICES).",
            ["metric", "model"], registry=registry)
        self.cascade_verdicts = Counter(
            "evalfleet_cascade_verdicts",
            "Verdicts of judge cascades by the tier that settled them (1: the cheapest); "
            "outcome low_confidence: no tier was sure enough, the last tier's was kept.",
            ["metric", "tier", "outcome"], registry=registry)

    def record_verdict(
        self, *, metric: str, status: str, error_class: str | None,
        attributes: Mapping[str, Any], scores: Mapping[str, float | None],
        sample_ts: datetime, created_at: datetime,
    ) -> None:
        """Count a stored verdict, observe its scores and its lag."""
        segment = self.labeler.values(attributes)
        self._child(self.verdicts, (metric, status, error_class or "", *segment)).inc()
        for name, value in scores.items():
            if value is not None:
                self._child(self.scores, (metric, name, *segment)).observe(value)
        self._child(self.lag, (metric,)).observe(
            max(0.0, (created_at - sample_ts).total_seconds()))

    def _child(self, family: Any, labels: tuple[str, ...]) -> Any:
        """``family.labels(*labels)``, looked up once: ``labels`` validates and takes a
        lock on every call, several times per verdict. The label sets are bounded (the
        labeler keeps a fixed number of segment values)."""
        key = (id(family), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = family.labels(*labels)
        return child

    def record_cascade(self, *, metric: str, tier: int, low_confidence: bool) -> None:
        """Count a cascade's verdict under the tier that settled it."""
        self.cascade_verdicts.labels(
            metric, str(tier), "low_confidence" if low_confidence else "settled").inc()

    def record_judge_error(self, *, metric: str, error_class: str) -> None:
        """Count one failed judge call or unusable reply."""
        self.judge_errors.labels(metric, error_class).inc()

    def record_format_step_down(self, *, judge_model: str, mode: str) -> None:
        """Count one step down of a judge model's response format (to ``mode``)."""
        self.format_step_downs.labels(judge_model, mode).inc()

    def record_identity_change(self, *, judge_model: str) -> None:
        """Count one change of what a judge model reports about itself."""
        self.identity_changes.labels(judge_model).inc()

    def record_limiter_wait(self, *, metric: str, wait_s: float) -> None:
        """Observe how long a job waited for the fleet rate limiter."""
        self.limiter_wait.labels(metric).observe(max(0.0, wait_s))

    def record_cost(self, *, metric: str, judge_model: str, prompt_tokens: int | None,
                    completion_tokens: int | None, cost_usd: float | None,
                    cached_tokens: int | None = None) -> None:
        """Count a verdict's tokens (its cached prompt tokens among them), and its cost when
        known (priced by ``model_prices``)."""
        self.tokens.labels(metric, judge_model, "prompt").inc(prompt_tokens or 0)
        self.tokens.labels(metric, judge_model, "completion").inc(completion_tokens or 0)
        self.cached_tokens.labels(metric, judge_model).inc(
            min(cached_tokens or 0, prompt_tokens or 0))
        if cost_usd is not None:
            self.cost.labels(metric, judge_model).inc(max(0.0, cost_usd))


class QueueDepthCollector(Collector):
    """Reads queue depths (messages waiting) from Redis at scrape time.

    Args:
        redis_url: The broker's Redis URL.
        queues: Queue names (``eval.<metric>``).
    """

    def __init__(self, redis_url: str, queues: Sequence[str]) -> None:
        import redis

        self._client = redis.Redis.from_url(redis_url, socket_timeout=2)
        self._queues = list(queues)

    def collect(self) -> Iterator[Metric]:
        """Yield ``evalfleet_queue_depth`` and ``evalfleet_unacked_jobs``."""
        depth = GaugeMetricFamily(
            "evalfleet_queue_depth",
            "Messages waiting in each queue, every priority (a message carries up to "
            "EVALFLEET_BATCH_SIZE jobs).", labels=["queue"])
        unacked = GaugeMetricFamily("evalfleet_unacked_jobs",
                                    "Messages delivered to a worker, not yet acknowledged.")
        try:
            lengths = waiting_messages(self._client, self._queues)
            held = self._client.hlen(UNACKED_KEY)
        except Exception as exc:  # a scrape must not fail because the broker is down
            logger.warning("cannot read queue depths: %s", type(exc).__name__)
            return
        for queue, length in zip(self._queues, lengths, strict=True):
            depth.add_metric([queue], length)
        unacked.add_metric([], held)
        yield depth
        yield unacked


_default: Telemetry | None = None
_default_lock = threading.Lock()


def configure_telemetry(
    *, segment_keys: Sequence[str], max_segment_values: int,
    registry: CollectorRegistry = REGISTRY,
) -> Telemetry:
    """Create the process-wide telemetry (once; later calls return the first).

    Args:
        segment_keys: Attribute keys that become labels.
        max_segment_values: Distinct values kept per key.
        registry: Where the metrics are registered.

    Returns:
        The process-wide telemetry.
    """
    global _default
    with _default_lock:
        if _default is None:
            _default = Telemetry(registry=registry, segment_keys=segment_keys,
                                 max_segment_values=max_segment_values)
        return _default


def telemetry() -> Telemetry:
    """The process-wide telemetry, with default labels if it was never configured."""
    return _default or configure_telemetry(segment_keys=("app",), max_segment_values=50)


def record_verdict(
    metric: str, status: str, error_class: str | None, attributes: Mapping[str, Any],
    scores: Mapping[str, float | None], sample_ts: datetime, created_at: datetime,
) -> None:
    """Count a stored verdict, observe its scores and its sample-to-verdict lag.

    Args:
        metric: The metric.
        status: ``ok`` or ``failed``.
        error_class: Why it failed, or None.
        attributes: The sample's attributes (segment labels are taken from them).
        scores: Its 0..1 scores (None values are skipped).
        sample_ts: The sample's time.
        created_at: When the verdict was stored.
    """
    telemetry().record_verdict(metric=metric, status=status, error_class=error_class,
                               attributes=attributes, scores=scores, sample_ts=sample_ts,
                               created_at=created_at)


def record_judge_error(metric: str, error_class: str) -> None:
    """Count one judge failure (``judge_unavailable``, ``truncated``, ``schema``...)."""
    telemetry().record_judge_error(metric=metric, error_class=error_class)


def record_limiter_wait(metric: str, wait_s: float) -> None:
    """Observe a wait for the fleet rate limiter, in seconds."""
    telemetry().record_limiter_wait(metric=metric, wait_s=wait_s)


def record_cost(metric: str, judge_model: str, prompt_tokens: int | None,
                completion_tokens: int | None, cost_usd: float | None,
                cached_tokens: int | None = None) -> None:
    """Count the tokens of one verdict (its cached prompt tokens among them) and its cost in
    US dollars (None when unpriced)."""
    telemetry().record_cost(metric=metric, judge_model=judge_model, prompt_tokens=prompt_tokens,
                            completion_tokens=completion_tokens, cost_usd=cost_usd,
                            cached_tokens=cached_tokens)


def start_metrics_server(
    port: int, *, queues: Sequence[str] = (), redis_url: str | None = None,
    registry: CollectorRegistry = REGISTRY, host: str = "0.0.0.0",
) -> Any:
    """Serve ``/metrics`` on ``port`` from a daemon thread (0 turns it off).

    Args:
        port: The port; 0 does nothing.
        queues: Queues whose depth to report (needs ``redis_url``).
        redis_url: The broker, when it is Redis.
        registry: What to serve.
        host: Address to listen on.

    Returns:
        The server (with ``shutdown()``), or None when off.
    """
    if port == 0:
        return None
    if redis_url and queues:
        registry.register(QueueDepthCollector(redis_url, queues))
    server, _thread = start_http_server(port, addr=host, registry=registry)
    logger.info("Prometheus metrics on http://%s:%s/metrics", host, port)
    return server
