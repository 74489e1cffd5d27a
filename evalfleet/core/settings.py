"""The one settings object, read from the environment and `.env` at start-up.

Every other module receives values from here as arguments; none reads the
environment itself. Secrets (the API key, passwords inside URLs) are masked in
``repr`` and can be listed with :meth:`Settings.secret_values` so log filters
can scrub them.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from evalfleet.core.endpoint import ENDPOINT_NAME, JudgeEndpoint
from evalfleet.core.errors import InvalidSettings
from evalfleet.core.price import ModelPrice, Price, resolve_prices
from evalfleet.core.ratelimit import RateLimit
from evalfleet.core.review_slice import MetricSlice, ReviewSlice, Stratum

#: Broker URL used when none is configured: kombu's file-system transport.
EMBEDDED_BROKER_URL = "filesystem://localhost//"

#: URL schemes of a Redis server (broker or shared state).
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


#: Query parameters whose values are credentials (``?api_key=``, ``?token=``...).
_SECRET_PARAM = re.compile(r"key|token|secret|passw|pwd|sig|auth|credential", re.IGNORECASE)


def mask_url(url: str) -> str:
    """Return ``url`` with its password and secret query values replaced by ``***``.

    Args:
        url: A URL such as ``postgresql+psycopg://user:pw@host/db``.

    Returns:
        The same URL, credentials masked; unchanged when it has none. A URL that
        cannot be parsed is replaced whole by ``***``.
    """
    try:
        parts = urlsplit(url)
        password, port = parts.password, parts.port
    except ValueError:
        return "***"
    masked = url
    if password is not None:
        user = parts.username or ""
        host = parts.hostname or ""
        shown_port = f":{port}" if port else ""
        masked = urlunsplit(parts._replace(netloc=f"{user}:***@{host}{shown_port}"))
    for value in _secret_params(parts.query):
        masked = masked.replace(value, "***")
    return masked


def strip_credentials(url: str) -> str:
    """``url`` without its user, password and secret query values: a name for it that
    may go anywhere (a Redis key, a metric label, a log line)."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return "***"
    netloc = f"{host}:{port}" if port else host
    return mask_url(urlunsplit(parts._replace(netloc=netloc)))


def url_secrets(url: str | None) -> list[str]:
    """The credentials inside ``url``: its password and secret query values."""
    if not url:
        return []
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return [url]
    found = [password] if password else []
    return found + _secret_params(parts.query)


def url_password(url: str | None) -> str | None:
    """The password inside ``url``, or None."""
    try:
        return urlsplit(url).password if url else None
    except ValueError:
        return None


def _secret_params(query: str) -> list[str]:
    return [value for name, value in parse_qsl(query, keep_blank_values=False)
            if _SECRET_PARAM.search(name) and value]


class ShadowJudge(BaseModel):
    """A second judge that sees a share of a metric's traffic, kept out of alerts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(min_length=1)
    """The shadow's judge model."""

    share: float = Field(gt=0, le=1)
    """Share of the metric's enqueued samples the shadow judges too (by sample id)."""


def choose_judge_model(metric: str, *, metric_default: str | None,
                       per_metric: Mapping[str, str], default: str) -> str:
    """The judge model a metric's jobs use: the per-metric setting
    (``EVALFLEET_JUDGE_MODELS``), then the metric file's ``judge.model``, then
    ``EVALFLEET_JUDGE_MODEL``. A job that names its model (calibration, shadows) keeps it.
    """
    return per_metric.get(metric) or metric_default or default


#: One of the settings groups below.
_Group = TypeVar("_Group", bound=BaseModel)


class StoreSettings(BaseModel):
    """The verdict store."""

    database_url: str | None = None
    """SQLAlchemy URL of the verdict store (``postgresql+psycopg://...``); unset means a
    SQLite file in ``data_dir``."""

    database_read_url: str | None = None
    """A read-only copy of the store (a streaming replica) for the commands and pages that
    only read: ``evalfleet ui``, ``alerts list``, ``alerts show``, ``status`` and
    ``export``; unset means ``database_url``. Writes always go to ``database_url``."""

    data_dir: Path = Path(".evalfleet")
    """Where the embedded defaults (SQLite file, file-system broker) keep their data."""

    claim_lease_s: float = Field(default=300.0, gt=0)
    """How long a worker may hold the exclusive claim on one job's verdict key; must
    exceed the longest job (two judge calls), checked at start."""

    keep_samples: bool = True
    """Workers store each verdict's sample content (input, output, context, reference,
    fields, as the producer accepted it, after redaction) beside the verdict, so alerts
    and pages can show what was judged. False stores none."""


class BrokerSettings(BaseModel):
    """The broker and the Redis the fleet shares."""

    broker_url: str | None = None
    """Celery broker URL (``redis://``, ``amqp://``); unset means a file-system broker."""

    shared_redis_url: str | None = Field(default=None, validation_alias=AliasChoices(
        "EVALFLEET_SHARED_REDIS_URL", "EVALFLEET_LIMITER_URL", "shared_redis_url"))
    """Redis holding what the fleet shares besides jobs: rate budgets, daily spend and the
    producers' deduplication window. Unset: the broker when it is Redis; with another
    broker and none set, each process keeps its own budgets and window and no daily
    budget applies. ``EVALFLEET_LIMITER_URL`` is read as an older name."""

    visibility_timeout_s: int = Field(default=900, gt=0)
    """Redis broker: seconds before an unacknowledged job is handed to another worker
    (how long the jobs of a crashed worker wait). Must exceed the longest job (two judge
    calls) plus ``retry_max_s``, or a job waiting out its retry is handed out twice
    (checked at start)."""

    redis_atomic_consume: bool = True
    """Redis broker: workers wait with ``BLMOVE`` and pop a job and record it as
    unacknowledged in one Lua script (needs Redis 6.2 or newer). Off: kombu's ``BRPOP``,
    which loses a job popped but not yet recorded when Redis or the worker dies then."""

    batch_size: int = Field(default=16, ge=1, le=1000)
    """Jobs per broker message from producers; also sizes a worker's task threads."""

    check_batch_size: int = Field(default=128, ge=1, le=1000)
    """Jobs per broker message of a check metric (``kind: check``) from producers. A
    check holds no judge slot and runs in microseconds, so a check message's cost is
    mostly what every message pays once: Celery's delivery and ack, the task's thread,
    the claim-and-save transaction. Measured on one worker (docs/performance.md), a
    check verdict cost 0.26 ms of worker CPU in messages of 16 jobs and 0.15 ms in
    messages of 64 without Celery, the database's CPU about halved too. Through a
    worker on an idle machine, 128 stored 2,793 to 3,204 check verdicts a second against
    2,381 to 2,744 at 64 (256 no more than 128): the Postgres transaction, not the
    worker, is what a larger message spreads. A message's team checks run one after
    another, so its longest run is this many times their ``timeout_s``."""

    def jobs_per_message(self, *, check: bool) -> int:
        """Jobs a producer puts in one message of a check metric or of a judged one."""
        return self.check_batch_size if check else self.batch_size


class JudgeSettings(BaseModel):
    """The judge: endpoint, models, output format, retries, rate limits and spend."""

    openai_base_url: str | None = Field(
        default=None, validation_alias=AliasChoices("OPENAI_BASE_URL", "openai_base_url"),
    )
    """Base URL of the judge, any OpenAI-compatible server, e.g.
    ``http://127.0.0.1:8400/v1``; unset means OpenAI's."""

    openai_api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("OPENAI_API_KEY", "openai_api_key"),
    )
    """API key sent to the judge (masked everywhere)."""

    judge_endpoints: dict[str, JudgeEndpoint] = Field(default_factory=dict)
    """More judge servers by name, for cascade tiers that name one (``endpoint: local``
    in a metric file), JSON: ``{"local": {"base_url": "http://10.0.0.5:8080/v1",
    "api_key_env": "LOCAL_JUDGE_KEY", "max_in_flight": 4}}``; each also takes ``rpm``
    and ``tpm``. Each has its own circuit breaker, rate budgets and cap on calls in
    flight (unset limits: the fleet's). Moving one to another URL changes no verdict
    key."""

    metrics_dir: Path | None = None
    """Extra metric files (``*.yaml``); they add metrics or replace bundled ones by name."""

    judge_model: str = "gpt-4o-mini"
    """Default judge model; a metric file or ``judge_models`` may override it."""

    judge_models: dict[str, str] = Field(default_factory=dict)
    """Per-metric judge model, e.g. ``{"rag_qa": "gpt-4.1"}`` (JSON in the environment)."""

    shadow_judges: dict[str, ShadowJudge] = Field(default_factory=dict)
    """Per metric, a shadow judge and its share of traffic, e.g. ``{"rag_qa": {"model":
    "gpt-4.1", "share": 0.1}}`` (JSON in the environment): producers enqueue those samples
    a second time for it; ``evalfleet calibrate --compare`` reports the agreement."""

    judge_client: str = "http"
    """The judge provider, by its name in ``workers/judge/registry.py`` (another name stops
    the worker at start, naming the known ones): ``http``, the lean aiohttp client, many
    calls in flight per process (default); ``openai``, the ``openai`` package's async
    client (its own behaviour: provider plugins, auth refresh), on the same loop, at about
    3 ms of CPU per call against 0.2 ms."""

    judge_rpm: float | None = Field(default=None, gt=0)
    """Requests per minute the whole fleet may send to the judge, per model (unset: no
    limit); shared through Redis when there is one."""

    judge_tpm: float | None = Field(default=None, gt=0)
    """Tokens per minute the whole fleet may use, per model (prompt estimate plus
    ``max_tokens`` before a call, corrected from the reported usage after it)."""

    judge_rate_limits: dict[str, dict[str, float]] = Field(default_factory=dict)
    """Per-model limits overriding the two above, JSON: ``{"gpt-4.1": {"rpm": 500,
    "tpm": 30000}}``."""

    judge_access_pause_s: float = Field(default=300.0, gt=0)
    """When the judge refuses access (401, 403, exhausted quota) a worker stops consuming
    that metric's queue for this long, then tries again; the jobs wait in the queue."""

    rate_limit_max_wait_s: float = Field(default=2.0, ge=0)
    """Longest a call waits for rate budget while holding a slot; a longer wait sends
    its job back to the queue at once, not as an attempt, and the worker stops taking
    that queue for the wait."""

    judge_max_in_flight: int | None = Field(default=None, gt=0)
    """Judge calls the whole fleet keeps in flight per endpoint and model (unset: no cap).
    Set it to what the server serves at once (llama.cpp's ``--parallel`` slots): calls
    beyond it wait in the workers, not in the server until they time out. Shared through
    Redis as leases, so a killed worker's slots come back after the judge timeout."""

    judge_adaptive_in_flight: bool = False
    """Adapt the cap on calls in flight to what the server sustains (AIMD on its latency:
    up while answers come near the fastest seen, down on queueing, timeouts, 429 or 503),
    between 1 and ``judge_max_in_flight`` (unset: the worker's concurrency). One value per
    endpoint and model for the whole fleet, in Redis beside the slots: every worker's
    answers move it (without a shared Redis, each process adapts its own)."""

    slot_max_wait_s: float = Field(default=10.0, ge=0)
    """Longest a call waits for one of the ``judge_max_in_flight`` slots; a longer wait sends
    its job back to the queue at once, not as an attempt, and the worker stops taking that
    queue for the wait. Counted in the start-up check of the timeouts."""

    model_prices: dict[str, ModelPrice] = Field(default_factory=dict)
    """One price per judge model in US dollars per million tokens, JSON: ``{"gpt-4o-mini":
    {"input": 0.15, "cached_input": 0.075, "output": 0.60, "batch": 0.5}}``.
    ``cached_input`` (prompt tokens served from the provider's cache) defaults to
    ``input``; ``batch`` (the share a Batch API request costs) to
    ``batch_price_multiplier``. The older ``[input, output]`` form still reads. Verdicts
    of other models carry no cost."""

    batch_price_multiplier: float = Field(default=0.5, gt=0, le=1)
    """Share of ``model_prices`` a verdict judged through the Batch API costs, for models
    whose price states no ``batch`` of its own (the fleet's default; deprecated in favour
    of ``batch`` in ``model_prices``)."""

    prompt_cache_key: bool = True
    """Send the request parameter prompt_cache_key (``evalfleet:<metric>:<prompt
    version>``) with each judge call, so a provider routes one metric's calls to the same
    prompt cache; an endpoint that refuses the parameter has it dropped for that model,
    fleet-wide, and the call sent again at once. False never sends it."""

    def resolved_model_prices(self) -> dict[str, Price]:
        """Every configured model's price with its defaults filled in (cached input at the
        input price, the fleet's batch share)."""
        return resolve_prices(self.model_prices, batch_multiplier=self.batch_price_multiplier)

    batch_metrics: list[str] = Field(default_factory=list)
    """Metrics judged through the provider's Batch API (besides those whose metric file
    says ``judge: {mode: batch}``), JSON: ``["nightly_quality"]``. Their verdicts arrive
    within the provider's turnaround, at the batch price."""

    batch_purposes: list[Literal["shadow", "calibration", "canary"]] = Field(
        default_factory=list)
    """Job purposes judged in batch mode whatever their metric, JSON: ``["shadow",
    "calibration"]``. Production jobs of other metrics stay synchronous."""

    batch_max_requests: int = Field(default=50_000, gt=0)
    """Requests per batch file at most (the provider's limit)."""

    batch_max_file_bytes: int = Field(default=200_000_000, gt=0)
    """Bytes per batch input file at most (the provider's limit)."""

    batch_max_wait_s: float = Field(default=300.0, ge=0)
    """Longest a spooled job waits for a full batch before a smaller one is sent."""

    batch_poll_s: float = Field(default=60.0, gt=0)
    """Seconds between two rounds of ``evalfleet beat``'s batch submitter and collector."""

    batch_reask_sync: bool = False
    """Re-ask an unusable batch reply at once through the synchronous judge (at its
    price) when ``reask_on_invalid`` is on; off, the re-ask goes into a later batch."""

    batch_failed_retry_s: float = Field(default=600.0, ge=0)
    """After a batch failed without running (the enqueued-token limit), how long its
    jobs wait before the next batch takes them; no attempt is counted."""

    batch_flavor: str = "openai"
    """Whose Batch API ``evalfleet beat`` speaks, by its dialect's name in
    ``workers/judge/registry.py`` (another name stops the beat at start; docs/batch.md):
    ``openai`` (the default); ``azure`` sends the
    ``api-version`` query and the ``api-key`` header, and names the endpoint
    ``/chat/completions``; ``together`` uploads files with the purpose ``batch-api``;
    ``groq`` is OpenAI's shape."""

    batch_base_url: str | None = None
    """The base URL ``/files`` and ``/batches`` are under, e.g.
    ``https://RESOURCE.openai.azure.com/openai``; unset: the judge's (``OPENAI_BASE_URL``)."""

    batch_api_key: SecretStr | None = None
    """The Batch API's key (masked everywhere); unset: ``OPENAI_API_KEY``."""

    batch_api_version: str = "2024-10-21"
    """Azure OpenAI's ``api-version`` (``batch_flavor: azure`` only)."""

    daily_budgets_usd: dict[str, float] = Field(default_factory=dict)
    """Per-metric daily budget in US dollars, JSON: ``{"rag_qa": 50}``. Near it producers
    lower the metric's sampling rate (accepted jobs are still judged)."""

    budget_soft_fraction: float = Field(default=0.8, ge=0, le=1)
    """Share of a daily budget after which producers start lowering the sampling rate,
    reaching zero when the budget is spent."""

    judge_response_format: Literal[
        "json_schema", "json_object_schema", "json_object", "text"] = "json_schema"
    """The most constrained output the judge supports; a metric never asks for more. A
    judge that refuses it is stepped down automatically, per endpoint and model
    (``json_schema``, then ``json_object_schema``: JSON mode with the schema, which
    llama-cpp-python enforces, then ``json_object``, then ``text``)."""

    judge_timeout_s: float = Field(default=60.0, gt=0)
    """Timeout of one judge HTTP call, connect to last byte."""

    judge_max_reply_bytes: int = Field(default=1_048_576, ge=1024)
    """Largest answer body read from the judge (in chunks); a longer one is not read and its job
    ends as a ``truncated`` verdict (after the one re-ask)."""

    reask_on_invalid: bool = True
    """Re-ask the judge once, quoting the validation error, when its verdict is unusable."""

    max_attempts: int = Field(default=6, ge=1)
    """Judge calls per job before a transient failure becomes a dead letter."""

    retry_base_s: float = Field(default=2.0, gt=0)
    """First backoff delay after a transient judge failure; doubles per attempt, with jitter."""

    retry_max_s: float = Field(default=300.0, gt=0)
    """Longest backoff delay (also caps a judge's Retry-After)."""


class WorkerSettings(BaseModel):
    """A worker process: concurrency, shutdown, health and Prometheus metrics."""

    worker_concurrency: int = Field(default=256, ge=1)
    """Judge calls one worker process keeps in flight (``evalfleet worker --concurrency``)."""

    shutdown_grace_s: float = Field(default=25.0, ge=0)
    """After SIGTERM a worker takes no new jobs and waits this long for its running ones;
    then it stops waiting for the judge and puts the unfinished jobs back in the queue.
    Keep it a few seconds below the time the orchestrator waits before SIGKILL
    (Kubernetes ``terminationGracePeriodSeconds``, 30 s unless set; compose
    ``stop_grace_period``)."""

    health_port: int = Field(default=0, ge=0, le=65535)
    """Port of a worker's ``/livez`` and ``/readyz`` endpoints; 0 turns them off."""

    liveness_stall_s: float = Field(default=180.0, gt=0)
    """A worker whose queues hold waiting jobs but that neither started nor finished a
    job for this long is reported not live (``/livez``). Must exceed two judge calls
    (checked at start)."""

    readiness_timeout_s: float = Field(default=2.0, gt=0)
    """Timeout of each readiness check (broker, database, judge)."""

    judge_probe_url: str | None = None
    """No longer read (a warning says so at start): the readiness check asks the judge's
    provider for its model list (``{OPENAI_BASE_URL}/models`` for OpenAI's shape), as
    ``evalfleet judge check`` does."""

    metrics_port: int = Field(default=0, ge=0, le=65535)
    """Port of the Prometheus ``/metrics`` endpoint of workers and the beat; 0 turns it off."""

    metrics_segment_keys: list[str] = Field(default_factory=lambda: ["app"])
    """Sample attributes that become labels of the verdict and score metrics."""

    metrics_max_segment_values: int = Field(default=50, ge=1)
    """Distinct values kept per segment label; later values are counted as ``other``."""


class LimitSettings(BaseModel):
    """Producers: sampling, backpressure, sample limits and deduplication."""

    sample_rate: float = Field(default=1.0, ge=0.0, le=1.0)
    """Share of samples the producer keeps when ``--sample-rate`` is not given and the
    sampling config leaves the metric's rate unset."""

    sampling_config: Path | None = None
    """Producer sampling config (YAML or JSON): per-metric rates, filters, segment
    minimums, delays, queue limits and redaction (every key in
    ``ops/sampling.example.yaml``); re-read within a second of a change."""

    max_queue_depth: int = Field(default=100_000, ge=0)
    """Jobs a metric queue may hold before producers shed (0: no limit); the sampling
    config may set it per metric."""

    shed_policy: Literal["drop_new", "lower_rate"] = "drop_new"
    """What producers do above ``max_queue_depth``: drop new jobs, or lower the sampling
    rate in proportion to the excess (rate x limit / depth); the sampling config may set
    it per metric."""

    max_field_chars: int = Field(default=65_536, ge=1)
    """Longest text a producer accepts in one field (input, output, reference, each
    context item, each attribute and ``fields`` value), in characters."""

    field_char_limits: dict[str, int] = Field(default_factory=dict)
    """Per-field overrides of ``max_field_chars``, JSON: ``{"context": 200000,
    "fields.product_opinion_summary": 20000}``."""

    max_context_items: int = Field(default=256, ge=1)
    """Most retrieved chunks a producer accepts in one sample's ``context``."""

    sample_max_depth: int = Field(default=16, ge=2, le=128)
    """Deepest nesting of arrays and objects a producer accepts in one record (the record
    itself is level 1; at most 128); deeper records are rejected naming the field."""

    sample_max_keys: int = Field(default=256, ge=1)
    """Most keys a producer accepts in one object of a record (``attributes``, ``fields``
    and objects inside ``fields``)."""

    sample_max_key_chars: int = Field(default=256, ge=1)
    """Longest key a producer accepts in any object of a record, in characters."""

    dedupe_window_s: float = Field(default=3600.0, ge=0)
    """Producers enqueue one job per sample id and metric within this window (0: off);
    shared through Redis when the broker is Redis."""

    dedupe_memory_ids: int = Field(default=100_000, ge=1)
    """Ids the in-memory deduplication remembers (non-Redis brokers, one-shot produce)."""

    producer_batch_size: int = Field(default=500, ge=1)
    """Jobs a producer publishes in one broker round trip."""

    producer_broker_timeout_s: float = Field(default=5.0, gt=0)
    """Socket timeout of a producer's broker calls, so a hung broker fails fast."""

    sdk_buffer_size: int = Field(default=10_000, ge=1)
    """Samples the SDK (``evalfleet.sdk.submit``) buffers in memory before it drops new ones."""

    sdk_max_wait_s: float = Field(default=60.0, gt=0)
    """How long the SDK keeps a buffered sample while the broker is down before dropping it."""


class IngestSettings(BaseModel):
    """The HTTP ingest service (``evalfleet ingest``)."""

    ingest_tokens: SecretStr | None = None
    """Bearer tokens ``evalfleet ingest`` accepts, comma-separated (masked everywhere)."""

    ingest_tokens_file: Path | None = None
    """A file of bearer tokens for ``evalfleet ingest``, one per line (``#`` comments)."""

    ingest_max_request_bytes: int = Field(default=8 * 1024 * 1024, ge=1)
    """Largest request body ``evalfleet ingest`` reads; larger ones get 413."""

    ingest_max_batch: int = Field(default=1000, ge=1)
    """Most samples in one ``evalfleet ingest`` request; more get 413."""

    otlp_max_spans_per_request: int = Field(default=10_000, ge=1)
    """Most spans in one ``POST /v1/traces`` request; more get 413."""

    otlp_max_attributes_per_span: int = Field(default=512, ge=1)
    """Most attributes (resource, scope and span together) one span may carry; a span
    with more is rejected by name in the answer's ``partial_success``."""

    otlp_max_attribute_bytes: int = Field(default=1_048_576, ge=64)
    """Largest attribute value (a string, or an array's or map's strings together), in
    bytes; a span with a larger one is rejected naming the attribute."""

    otlp_max_spans_per_trace: int = Field(default=1000, ge=1)
    """Most spans buffered for one trace; later spans of it are rejected and counted."""

    otlp_max_trace_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    """Most bytes buffered for one trace (its spans as kept); later spans of it are
    rejected and counted."""

    otlp_max_open_traces: int = Field(default=100_000, ge=1)
    """Most traces buffered at once across the fleet; a request that would open more
    gets 503 with ``Retry-After`` (the exporter sends it again)."""

    otlp_quiet_s: float = Field(default=3.0, gt=0)
    """A trace whose root span has ended is produced once no span of it arrived for this
    long."""

    otlp_max_wait_s: float = Field(default=60.0, gt=0)
    """A trace is produced this long after its first span at the latest, root or not."""

    otlp_agent_max_wait_s: float = Field(default=600.0, gt=0)
    """The same for an agent's trace (one with a tool or agent span), whose run may
    outlast ``otlp_max_wait_s``: it is produced when its root span ends, or this long
    after its first span at the latest."""

    otlp_session_idle_s: float = Field(default=900.0, gt=0)
    """A session (the traces sharing a session or conversation id) is judged once no
    turn of it arrived for this long (metrics of unit ``session``)."""

    otlp_session_final_s: float = Field(default=3600.0, gt=0)
    """A judged session's turns are kept this long after its last turn: a turn arriving
    meanwhile makes its next version. Past it, its last version is final: one closed when
    idle is sent once more (`closed_by: final_wait`, the same key, no judge call) to mark
    its verdict final, and only then do alerts and corrected estimates count it."""

    otlp_session_max_age_s: float = Field(default=86_400.0, gt=0)
    """A session is judged this long after its first turn at the latest."""

    otlp_max_open_sessions: int = Field(default=100_000, ge=1)
    """Most sessions held at once across the fleet; a turn opening one more is shed and
    counted."""

    otlp_max_turns_per_session: int = Field(default=1000, ge=1)
    """Most turns kept per session; later turns are shed and counted."""

    otlp_max_session_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    """Most bytes kept per session (its turns as kept); a turn past it is shed and
    counted."""


class AlertSettings(BaseModel):
    """The alert engine (``evalfleet beat``), drift canaries and the alert page."""

    alert_rules_file: Path | None = None
    """Alert rules (YAML); unset means the defaults shipped in ``evalfleet/alerts/rules.yaml``."""

    alertmanager_url: str | None = None
    """Alertmanager base URL (``http://alertmanager:9093``): a receiver named
    ``alertmanager`` that every rule without its own receivers notifies."""

    alert_webhook_secret: SecretStr | None = None
    """Key of the HMAC-SHA256 signature sent with each generic webhook notification
    (masked everywhere)."""

    alert_external_url: str = "http://127.0.0.1:8500"
    """Base URL of ``evalfleet ui`` as people reach it: each alert's ``generatorURL`` is
    its page there (``<url>/alerts/<rule>?segment=...``)."""

    alert_tick_s: float = Field(default=15.0, gt=0)
    """How often the beat asks the alert engine to evaluate the rules that are due."""

    canary_interval_s: float = Field(default=300.0, ge=0)
    """How often ``evalfleet beat`` feeds each metric's queue a slice of its gold set as
    canary jobs (watched by ``judge_drift`` alert rules); 0 turns canaries off."""

    canary_samples: int = Field(default=4, ge=1, le=1000)
    """Gold samples per metric per canary interval, rotating through the gold set: with
    the defaults, 48 judge calls an hour per metric (1,152 a day)."""

    canary_gold_dir: Path | None = None
    """Directory of gold sets (``<metric>.jsonl``) the canaries come from; unset means the
    sets shipped with evalfleet. A metric without a gold set gets no canaries."""

    alert_delivery_attempts: int = Field(default=4, ge=1)
    """HTTP attempts per notification within one cycle; later cycles try again."""

    alert_retry_base_s: float = Field(default=1.0, ge=0)
    """Delay after a failed delivery attempt; doubles per attempt, with jitter."""

    alert_retry_max_s: float = Field(default=60.0, ge=0)
    """Longest delay between two delivery attempts."""

    alert_delivery_timeout_s: float = Field(default=10.0, gt=0)
    """Timeout of one notification HTTP request."""

    ui_token: SecretStr | None = None
    """The token ``evalfleet ui`` asks for (needed when it binds to anything but the
    loopback interface); open ``/?token=...`` once and a cookie carries it (masked
    everywhere)."""


class RetentionSettings(BaseModel):
    """How long verdicts, raw replies and sample content are kept."""

    verdict_retention_days: float | None = Field(default=None, gt=0)
    """``evalfleet purge`` deletes verdicts (and their scores) created more than this many
    days ago; unset keeps every verdict."""

    raw_output_retention_days: float | None = Field(default=None, gt=0)
    """``evalfleet purge`` empties the judge's raw output and the error text of verdicts
    created more than this many days ago, keeping their scores; unset keeps them."""

    sample_retention_days: float | None = Field(default=None, gt=0)
    """``evalfleet purge`` deletes the stored sample content of verdicts created more than
    this many days ago, keeping the verdicts; unset keeps it as long as the verdict."""

    dataset_retention_days: float | None = Field(default=None, gt=0)
    """``evalfleet purge`` deletes datasets whose last version is older than this many days
    (a dataset's own ``--retention-days`` wins); unset keeps them. Datasets keep copies of
    their samples, so the other retentions never empty them."""


class ReviewStratum(BaseModel):
    """Verdicts whose lowest normalised score is below ``below`` go to review at ``rate``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    below: float = Field(gt=0, le=1)
    """Upper bound (exclusive) on the verdict's lowest normalised score."""

    rate: float = Field(ge=0, le=1)
    """Inclusion probability of the verdicts in this stratum."""


class ReviewSettings(BaseModel):
    """The review queue: which verdicts people label, and the review page's forms."""

    review_rates: dict[str, float] = Field(default_factory=dict)
    """Share of each metric's production verdicts put in the review queue at random when
    stored (``{"rag_qa": 0.01}``); a metric not named gets no random slice."""

    review_strata: dict[str, list[ReviewStratum]] = Field(default_factory=dict)
    """Per metric, rates by the judge's score instead of the metric's rate
    (``{"rag_qa": [{"below": 0.5, "rate": 0.2}]}``: more of the low scores); each
    item records the rate it was chosen at."""

    review_labels_wanted: int = Field(default=1, ge=1, le=10)
    """Labels each new item asks for (more than one measures reviewers' agreement)."""

    review_lease_s: float = Field(default=900.0, gt=0)
    """How long an item taken on the review page stays with its reviewer."""

    review_expire_days: float = Field(default=14.0, gt=0)
    """An item not labelled this many days after it was queued expires (its sample is
    kept until then, whatever the sample retention)."""

    review_secret: SecretStr | None = None
    """Signs the review page's form tokens (CSRF); set the same value on every replica
    of ``evalfleet ui``. Unset: a random secret per process."""

    review_confidence_strata: dict[str, list[ReviewStratum]] = Field(default_factory=dict)
    """Per metric judged by a cascade, rates by the verdict's confidence, checked before
    ``review_strata`` (``{"bbh_match": [{"below": 0.8, "rate": 0.05}]}``: more of the
    verdicts the judges were unsure of); a verdict in no band, or of unknown confidence,
    gets the other rates."""

    @field_validator("review_rates")
    @classmethod
    def _rates_are_shares(cls, value: dict[str, float]) -> dict[str, float]:
        for metric, rate in value.items():
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"review rate of {metric!r} must be within 0..1, not {rate}")
        return value

    def review_slice(self) -> ReviewSlice:
        """The random slice these settings describe (metrics with a rate or strata)."""
        metrics = set(self.review_rates) | set(self.review_strata) | set(
            self.review_confidence_strata)
        return ReviewSlice({
            metric: MetricSlice(
                rate=self.review_rates.get(metric, 0.0),
                strata=tuple(Stratum(below=s.below, rate=s.rate)
                             for s in self.review_strata.get(metric, ())),
                confidence_strata=tuple(Stratum(below=s.below, rate=s.rate)
                                        for s in self.review_confidence_strata.get(metric, ())))
            for metric in sorted(metrics)
        }, labels_wanted=self.review_labels_wanted, expire_s=self.review_expire_days * 86400.0)


class ReadingSettings(BaseModel):
    """How the settings themselves are read."""

    strict_settings: bool = False
    """An ``EVALFLEET_*`` variable (in the environment or ``.env``) that is no setting,
    a misspelt ``EVALFLEET_DATABSE_URL`` say, stops every command with exit status 2;
    unset, each command warns about it, naming the closest setting. Variables the docs
    ask for other purposes (``EVALFLEET_TOKEN``, ``EVALFLEET_TEST_*``) are never flagged."""


if TYPE_CHECKING:
    # The type checker sees the fields only through their groups (``settings.judge.x``),
    # so a flat read (``settings.x``) fails mypy. At run time they stay flat: one
    # ``EVALFLEET_<FIELD>`` variable per field, whatever its group.
    _FlatFields = BaseSettings
else:
    class _FlatFields(StoreSettings, BrokerSettings, JudgeSettings, WorkerSettings,
                      LimitSettings, IngestSettings, AlertSettings, RetentionSettings,
                      ReviewSettings, ReadingSettings, BaseSettings):
        """Every group's fields in one flat model, as pydantic-settings reads them."""


class Settings(_FlatFields):
    """Everything evalfleet can be configured with: the groups above in one object.

    Environment variables carry the ``EVALFLEET_`` prefix except the two the
    OpenAI client conventionally reads, ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``; a
    field's group does not change its name. Code reads a field through its group
    (``settings.judge.judge_model``), and a component that needs only one group takes
    that group (``settings.alerts``) as its value.
    """

    model_config = SettingsConfigDict(
        env_prefix="EVALFLEET_", env_file=".env", extra="ignore", populate_by_name=True,
    )

    @field_validator("database_url", "database_read_url", "broker_url", "openai_base_url",
                     "batch_base_url",
                     "alertmanager_url", "shared_redis_url", "judge_probe_url",
                     mode="before")
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("judge_endpoints")
    @classmethod
    def _endpoint_names(cls, value: dict[str, JudgeEndpoint]) -> dict[str, JudgeEndpoint]:
        for name in value:
            if not re.fullmatch(ENDPOINT_NAME, name):
                raise ValueError(f"judge endpoint name {name!r} must be lower case letters, "
                                 "digits, _ and -, starting with a letter")
        return value

    @model_validator(mode="after")
    def _timeouts_fit_together(self) -> Settings:
        # A call and its re-ask, each waiting for a fleet-wide slot when there is a cap.
        capped = self.judge.judge_max_in_flight or self.judge.judge_adaptive_in_flight
        slot_wait_s = self.judge.slot_max_wait_s if capped else 0.0
        longest_job_s = 2 * (self.judge.judge_timeout_s + slot_wait_s)
        if self.broker.visibility_timeout_s <= longest_job_s + self.judge.retry_max_s:
            raise ValueError(
                f"visibility_timeout_s ({self.broker.visibility_timeout_s}) must exceed two judge "
                f"calls plus retry_max_s ({longest_job_s:g} + {self.judge.retry_max_s:g} s), or "
                "jobs are handed out twice",
            )
        if self.worker.liveness_stall_s <= longest_job_s:
            raise ValueError(
                f"liveness_stall_s ({self.worker.liveness_stall_s:g}) must exceed two judge calls "
                f"({longest_job_s:g} s), or a worker busy with slow jobs is restarted",
            )
        if self.store.claim_lease_s <= longest_job_s:
            raise ValueError(
                f"claim_lease_s ({self.store.claim_lease_s:g}) must exceed two judge calls "
                f"({longest_job_s:g} s), or another worker takes over a job still running",
            )
        return self

    @property
    def store(self) -> StoreSettings:
        """The verdict store's settings."""
        return self._group(StoreSettings)

    @property
    def broker(self) -> BrokerSettings:
        """The broker's settings."""
        return self._group(BrokerSettings)

    @property
    def judge(self) -> JudgeSettings:
        """The judge's settings."""
        return self._group(JudgeSettings)

    @property
    def worker(self) -> WorkerSettings:
        """A worker process's settings."""
        return self._group(WorkerSettings)

    @property
    def limits(self) -> LimitSettings:
        """The producers' sampling and limits."""
        return self._group(LimitSettings)

    @property
    def ingest(self) -> IngestSettings:
        """The ingest service's settings."""
        return self._group(IngestSettings)

    @property
    def alerts(self) -> AlertSettings:
        """The alert engine's settings."""
        return self._group(AlertSettings)

    @property
    def retention(self) -> RetentionSettings:
        """What is kept, and for how long."""
        return self._group(RetentionSettings)

    @property
    def review(self) -> ReviewSettings:
        """The review queue's settings."""
        return self._group(ReviewSettings)

    @property
    def reading(self) -> ReadingSettings:
        """How the settings are read."""
        return self._group(ReadingSettings)

    def _group(self, group: type[_Group]) -> _Group:
        return group.model_construct(**{name: getattr(self, name) for name in group.model_fields})

    @property
    def embedded_database(self) -> bool:
        """True when no database URL is configured and a SQLite file is used."""
        return self.store.database_url is None

    @property
    def embedded_broker(self) -> bool:
        """True when no broker URL is configured and the file-system broker is used."""
        return self.broker.broker_url is None

    def resolved_database_url(self) -> str:
        """The database URL in effect, falling back to the embedded SQLite file."""
        if self.store.database_url is not None:
            return self.store.database_url
        return f"sqlite:///{(self.store.data_dir / 'evalfleet.db').resolve()}"

    def resolved_read_database_url(self) -> str:
        """Where the read-only commands and pages read: ``database_read_url``, else the store."""
        if self.store.database_read_url is not None:
            return self.store.database_read_url
        return self.resolved_database_url()

    def resolved_broker_url(self) -> str:
        """The broker URL in effect, falling back to the file-system broker."""
        return self.broker.broker_url if self.broker.broker_url is not None else EMBEDDED_BROKER_URL

    def resolved_shared_redis_url(self) -> str | None:
        """The Redis the fleet shares state in: the setting, else a Redis broker, else None."""
        if self.broker.shared_redis_url is not None:
            return self.broker.shared_redis_url
        broker = self.resolved_broker_url()
        return broker if broker.startswith(REDIS_SCHEMES) else None

    def judge_model_for(self, metric: str, *, metric_default: str | None) -> str:
        """The judge model for ``metric`` (:func:`choose_judge_model`)."""
        return choose_judge_model(metric, metric_default=metric_default,
                                  per_metric=self.judge.judge_models,
                                  default=self.judge.judge_model)

    def rate_limit_for(self, model: str) -> RateLimit:
        """The fleet's rate limits for ``model``: its own entry, else the global ones."""
        own = self.judge.judge_rate_limits.get(model, {})
        return RateLimit(requests_per_minute=own.get("rpm", self.judge.judge_rpm),
                         tokens_per_minute=own.get("tpm", self.judge.judge_tpm))

    @classmethod
    def environment_names(cls) -> dict[str, str]:
        """The environment variable each field is read from: its first alias, else
        ``EVALFLEET_<FIELD>``."""
        names: dict[str, str] = {}
        for name, field in cls.model_fields.items():
            alias = field.validation_alias
            names[name] = (
                str(alias.choices[0]) if isinstance(alias, AliasChoices)
                else f"EVALFLEET_{name.upper()}"
            )
        return names

    def as_environment(self) -> dict[str, str]:
        """Environment variables that reproduce these settings in a child process."""
        env: dict[str, str] = {}
        plain = self.model_dump(mode="json", include={
            name for name in type(self).model_fields
            if isinstance(getattr(self, name), dict | list)})
        for name, key in self.environment_names().items():
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            elif isinstance(value, Path):
                value = value.resolve()
            env[key] = json.dumps(plain[name]) if name in plain else str(value)
        return env

    def secret_values(self) -> list[str]:
        """Every secret string in these settings, for log scrubbing: the credentials in
        every URL setting, the API key, the webhook secret and the ingest tokens."""
        secrets: list[str | None] = []
        for name in self.url_fields():
            secrets.extend(url_secrets(getattr(self, name)))
        if self.judge.openai_api_key is not None:
            secrets.append(self.judge.openai_api_key.get_secret_value())
        if self.judge.batch_api_key is not None:
            secrets.append(self.judge.batch_api_key.get_secret_value())
        for endpoint in self.judge.judge_endpoints.values():
            secrets.extend(url_secrets(endpoint.base_url))
            secrets.append(endpoint.api_key())
        if self.alerts.alert_webhook_secret is not None:
            secrets.append(self.alerts.alert_webhook_secret.get_secret_value())
        if self.alerts.ui_token is not None:
            secrets.append(self.alerts.ui_token.get_secret_value())
        if self.review.review_secret is not None:
            secrets.append(self.review.review_secret.get_secret_value())
        if self.ingest.ingest_tokens is not None:
            tokens = self.ingest.ingest_tokens.get_secret_value()
            secrets.extend(t.strip() for t in tokens.split(","))
        return [s for s in secrets if s]

    @classmethod
    def url_fields(cls) -> list[str]:
        """The names of the settings that hold a URL (every one may carry a password)."""
        return [name for name in cls.model_fields if name.endswith("_url")]

    def __repr_args__(self) -> Any:
        urls = set(self.url_fields())
        for name, value in super().__repr_args__():
            if name in urls and isinstance(value, str):
                yield name, mask_url(value)
            else:
                yield name, value


#: ``EVALFLEET_*`` variables the docs ask people to set for other purposes than settings
#: (the bearer token of the OTLP exporter in docs/traces.md).
OTHER_VARIABLES = frozenset({"EVALFLEET_TOKEN"})

#: Prefixes of ``EVALFLEET_*`` variables that are no settings (the test suite's own).
OTHER_PREFIXES = ("EVALFLEET_TEST_",)

#: A variable's name on a line of a ``.env`` file (``NAME=`` or ``export NAME=``).
_DOTENV_NAME = re.compile(r"^[ \t]*(?:export[ \t]+)?([A-Za-z_][A-Za-z0-9_]*)[ \t]*=", re.M)

#: How pydantic-settings names the field whose value it could not parse as JSON.
_UNPARSED_FIELD = re.compile(r'error parsing value for field "([^"]+)"')


@dataclass(frozen=True)
class UnknownVariable:
    """An ``EVALFLEET_*`` variable that is no setting (its value is never shown)."""

    name: str
    """The variable as set."""

    closest: str | None
    """The setting whose name is closest, when one is close."""

    def __str__(self) -> str:
        hint = f"; did you mean {self.closest}?" if self.closest else ""
        return f"{self.name} is not an evalfleet setting and is ignored{hint}"


def setting_variables() -> frozenset[str]:
    """Every environment variable a setting is read from, older names included."""
    names = set(Settings.environment_names().values())
    for field in Settings.model_fields.values():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices):
            names.update(str(choice) for choice in alias.choices if str(choice).isupper())
    return frozenset(names)


def unknown_variables(names: Iterable[str]) -> list[UnknownVariable]:
    """The ``EVALFLEET_*`` names among ``names`` that no setting reads, each with the
    closest setting's name.

    Args:
        names: Variable names (the environment's, the ``.env`` file's).

    Returns:
        One entry per unknown name, sorted; empty when every name is a setting or a
        variable the docs ask for (``EVALFLEET_TOKEN``, ``EVALFLEET_TEST_*``).
    """
    known = setting_variables()
    unknown = []
    for name in sorted(set(names)):
        upper = name.upper()
        if (not upper.startswith("EVALFLEET_") or upper in known or upper in OTHER_VARIABLES
                or upper.startswith(OTHER_PREFIXES)):
            continue
        close = difflib.get_close_matches(upper, sorted(known), n=1, cutoff=0.6)
        unknown.append(UnknownVariable(name, close[0] if close else None))
    return unknown


def load_settings(*, env_file: Path = Path(".env")) -> tuple[Settings, list[UnknownVariable]]:
    """Read the settings from the environment and ``env_file``, as every command does.

    Args:
        env_file: The ``.env`` file (read when it exists).

    Returns:
        The settings, and the ``EVALFLEET_*`` variables that are no setting.

    Raises:
        InvalidSettings: A value is not what its variable needs (not JSON where JSON is
            needed, out of range...), naming the variable and the expected shape; or
            ``EVALFLEET_STRICT_SETTINGS`` is on and a variable is no setting.
    """
    try:
        settings = Settings(_env_file=env_file)  # type: ignore[call-arg]
    except SettingsError as exc:
        raise InvalidSettings(_unparsed(exc)) from None
    except ValidationError as exc:
        raise InvalidSettings("; ".join(_invalid(error) for error in exc.errors())) from None
    names = list(os.environ)
    if env_file.is_file():
        names += _DOTENV_NAME.findall(env_file.read_text(encoding="utf-8", errors="replace"))
    unknown = unknown_variables(names)
    if unknown and settings.reading.strict_settings:
        raise InvalidSettings("; ".join(str(item) for item in unknown)
                              + " (EVALFLEET_STRICT_SETTINGS is on)")
    return settings, unknown


def json_shape(name: str) -> str | None:
    """The JSON a setting holding a dict or a list expects, e.g. ``{"<key>": <number>}``;
    None for a setting that is not JSON."""
    field = Settings.model_fields.get(name)
    if field is None:
        return None
    shape = _shape(field.annotation)
    return shape if shape[:1] in "{[" else None


def _unparsed(exc: SettingsError) -> str:
    match = _UNPARSED_FIELD.search(str(exc))
    name = match.group(1) if match else None
    variable = Settings.environment_names().get(name or "")
    shape = json_shape(name or "")
    if variable is None or shape is None:
        return f"invalid settings: {exc}"
    return f"{variable} must be JSON, e.g. {shape}; it is not valid JSON"


def _invalid(error: Any) -> str:
    location = error["loc"]
    if not location:
        return f"invalid settings: {error['msg']}"
    name = str(location[0])
    variable = Settings.environment_names().get(name, name)
    inner = ".".join(str(part) for part in location[1:])
    where = f"{variable} ({inner})" if inner else variable
    shape = json_shape(name)
    wrong_kind = error["type"].endswith("_type") or error["type"] in ("missing",
                                                                      "extra_forbidden")
    expected = f"; expected JSON like {shape}" if shape and wrong_kind else ""
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"{where}: {message}{expected}"


def _shape(annotation: Any) -> str:
    """A placeholder for a value of type ``annotation``, written as JSON."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        arms = [arg for arg in args if arg is not type(None)]
        return _shape(arms[0]) if arms else "null"
    if origin is dict:
        return '{"<key>": ' + _shape(args[1]) + "}"
    if origin is list:
        return "[" + _shape(args[0]) + "]"
    if origin is Literal:
        return json.dumps(args[0])
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "{" + ", ".join(f'"{key}": {_shape(field.annotation)}'
                               for key, field in annotation.model_fields.items()) + "}"
    if annotation in (int, float):
        return "<number>"
    if annotation is bool:
        return "true"
    return '"<text>"'
