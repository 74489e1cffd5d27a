"""The sampling policy: what producers keep, per metric, and how. Pure.

A policy comes from a YAML or JSON file (see ``ops/sampling.example.yaml``)::

    defaults:            # every metric, unless it says otherwise
      rate: 0.1
      minimum_per_segment: 20
    segments:
      by: [app, route]   # the attributes that name a segment
      window_s: 3600     # minimum_per_segment counts per window
    metrics:
      rag_qa:
        rate: 0.05
        where: {app: support-bot, route: [/chat, /ask], model: {regex: "gpt-4.*"}}
        delay_s: 30
        max_queue_depth: 50000
        shed_policy: lower_rate
    redaction:
      patterns: {employee_id: "EMP-\\d{6}"}

Each value is resolved in one place, :meth:`Policy.rule_for`, in the order per
call (``--sample-rate``), per metric, ``defaults``, then the settings.
``where`` is replaced whole, never merged: a metric's own ``where`` is all of it.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from evalfleet.core.errors import InvalidSamplingConfig
from evalfleet.core.regex import LinearPattern, compile_linear
from evalfleet.core.settings import Settings
from producers.redact import BUILTIN_KINDS, MAX_REDACT_CHARS, RedactionRules, Redactor
from producers.traces.config import TraceSpec

ShedPolicy = Literal["drop_new", "lower_rate"]

#: Attributes that name a segment when the config does not say.
DEFAULT_SEGMENT_KEYS = ("app", "route", "model", "prompt_version")

#: Names an extra redaction kind may take (it becomes ``[NAME]`` in the text).
_KIND_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Condition(_Model):
    """A test on one attribute. Written as a string (equality), a list (membership)
    or a mapping with one of ``equals``, ``in``, ``regex``."""

    equals: str | None = None
    """The attribute equals this value."""

    in_: tuple[str, ...] | None = Field(default=None, alias="in")
    """The attribute is one of these values."""

    regex: str | None = None
    """The whole attribute value matches this regular expression."""

    def compiled(self) -> LinearPattern | None:
        """The compiled regex (RE2, linear time), or None."""
        return None if self.regex is None else compile_linear(self.regex)


def _shorthand(value: Any) -> Any:
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return {"equals": str(value)}
    if isinstance(value, list):
        return {"in": [str(item) for item in value]}
    return value


def _expand_conditions(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    expanded = {}
    for key, condition in value.items():
        expanded[key] = _shorthand(condition)
        tests = expanded[key] if isinstance(expanded[key], dict) else {}
        if len([k for k in tests if k in ("equals", "in", "regex")]) != 1:
            raise ValueError(f"attribute {key!r}: give exactly one of a value, a list, "
                             "'equals', 'in' or 'regex'")
        if "regex" in tests:
            try:
                compile_linear(str(tests["regex"]))
            except ValueError as exc:
                raise ValueError(f"attribute {key!r}: regex does not compile: {exc}") from None
    return expanded


class MetricRule(_Model):
    """How one metric samples; every key optional (None inherits)."""

    rate: float | None = Field(default=None, ge=0.0, le=1.0)
    """Share of samples kept, by id hash (nested: kept at 5% implies kept at 10%)."""

    where: dict[str, Condition] | None = None
    """Attribute conditions that must all hold; samples failing one are not considered."""

    minimum_per_segment: int | None = Field(default=None, ge=0)
    """The first N samples of each segment in each window are kept whatever the rate."""

    delay_s: float | None = Field(default=None, ge=0.0)
    """Judge this long after enqueueing, so a trace still being written is complete."""

    max_queue_depth: int | None = Field(default=None, ge=0)
    """Shed above this many queued jobs (0: no limit)."""

    shed_policy: ShedPolicy | None = None
    """Above the limit: ``drop_new``, or ``lower_rate`` (rate x limit / depth)."""

    @field_validator("where", mode="before")
    @classmethod
    def _expand(cls, value: Any) -> Any:
        return _expand_conditions(value)

    def merge(self, base: MetricRule) -> MetricRule:
        """This rule with its unset keys taken from ``base``."""
        own = {name: getattr(self, name) for name in type(self).model_fields
               if getattr(self, name) is not None}
        return base.model_copy(update=own)


class SegmentSpec(_Model):
    """How segments are named and how long a segment minimum lasts."""

    by: tuple[str, ...] = DEFAULT_SEGMENT_KEYS
    """Attributes whose values name a segment."""

    window_s: float = Field(default=3600.0, gt=0)
    """Window of ``minimum_per_segment``, aligned to the epoch (per hour by default)."""

    max_tracked: int = Field(default=10_000, ge=1)
    """Segments counted at once for the minimum; the least recently seen is forgotten."""

    max_new: int = Field(default=100, ge=0)
    """New segments per metric and window that get the minimum; past it a new segment
    is sampled at the rate (counted in ``evalfleet_producer_segments_capped_total``),
    so varying a segment attribute cannot buy every sample a place."""


class RedactionSpec(_Model):
    """Which PII is redacted before samples leave the producer."""

    kinds: tuple[str, ...] = BUILTIN_KINDS
    """Built-in kinds: ``email``, ``phone``, ``card``."""

    patterns: dict[str, str] = Field(default_factory=dict)
    """Extra kinds: lower-case name to regular expression."""

    attributes: bool = False
    """Redact attribute values too."""

    id: bool = False
    """Redact the sample id too."""

    max_chars: int = Field(default=MAX_REDACT_CHARS, ge=1)
    """Longest text redacted per field; the rest becomes ``[TRUNCATED]``."""

    @field_validator("kinds")
    @classmethod
    def _known_kinds(cls, kinds: tuple[str, ...]) -> tuple[str, ...]:
        unknown = sorted(set(kinds) - set(BUILTIN_KINDS))
        if unknown:
            raise ValueError(f"unknown kinds {unknown} (built in: {', '.join(BUILTIN_KINDS)})")
        return kinds

    @field_validator("patterns")
    @classmethod
    def _patterns_compile(cls, patterns: dict[str, str]) -> dict[str, str]:
        for name, source in patterns.items():
            if not _KIND_NAME.fullmatch(name):
                raise ValueError(f"pattern name {name!r}: use lower case letters, digits, _")
            try:
                compile_linear(source)
            except ValueError as exc:
                raise ValueError(f"pattern {name!r} does not compile: {exc}") from None
        return patterns


class PolicyFile(_Model):
    """The sampling config file."""

    version: Literal[1] = 1
    """Format version."""

    defaults: MetricRule = Field(default_factory=MetricRule)
    """Values every metric inherits."""

    metrics: dict[str, MetricRule] = Field(default_factory=dict)
    """Per-metric rules; with no ``--metric`` given, these are the metrics produced."""

    segments: SegmentSpec = Field(default_factory=SegmentSpec)
    """Segment naming and the minimum's window."""

    redaction: RedactionSpec = Field(default_factory=RedactionSpec)
    """PII redaction."""

    traces: TraceSpec = Field(default_factory=TraceSpec)
    """How OpenTelemetry traces become samples (``POST /v1/traces``)."""


@dataclass(frozen=True, slots=True)
class Fallbacks:
    """Global values a policy falls back to: the settings, or a command-line override."""

    rate: float = 1.0
    """Sampling rate (``EVALFLEET_SAMPLE_RATE``)."""

    max_queue_depth: int = 100_000
    """Queue limit (``EVALFLEET_MAX_QUEUE_DEPTH``); 0 means none."""

    shed_policy: ShedPolicy = "drop_new"
    """Shedding policy (``EVALFLEET_SHED_POLICY``)."""

    @classmethod
    def from_settings(cls, settings: Settings) -> Fallbacks:
        """The fallbacks configured in ``settings``."""
        return cls(rate=settings.limits.sample_rate,
                   max_queue_depth=settings.limits.max_queue_depth,
                   shed_policy=settings.limits.shed_policy)


@dataclass(frozen=True, slots=True)
class Rule:
    """A metric's rule with every value resolved."""

    metric: str
    """The metric."""
    rate: float
    """Sampling rate, 0..1."""
    where: Mapping[str, Condition]
    """Attribute conditions, all of which must hold."""
    patterns: Mapping[str, LinearPattern]
    """Compiled regex conditions, by attribute."""
    minimum_per_segment: int
    """Samples kept per segment and window whatever the rate."""
    delay_s: float
    """Delay before judging."""
    max_queue_depth: int | None
    """Queue limit, None for none."""
    shed_policy: ShedPolicy
    """What happens above the limit."""

    def matches(self, attributes: Mapping[str, str]) -> bool:
        """True when every condition holds for ``attributes`` (a missing key fails)."""
        for key, condition in self.where.items():
            value = attributes.get(key)
            if value is None:
                return False
            if condition.equals is not None and value != condition.equals:
                return False
            if condition.in_ is not None and value not in condition.in_:
                return False
            pattern = self.patterns.get(key)
            if pattern is not None and not pattern.fullmatch(value):
                return False
        return True


@dataclass(frozen=True)
class Policy:
    """A validated sampling policy, ready to apply."""

    spec: PolicyFile
    """The file's content, validated."""
    fallbacks: Fallbacks
    """Global values below the file's ``defaults``."""
    source: str = "(defaults)"
    """Where it was read from."""
    _rules: dict[tuple[str, float | None], Rule] = field(default_factory=dict, repr=False,
                                                          compare=False)

    @property
    def metric_names(self) -> list[str]:
        """The metrics the file lists, in file order."""
        return list(self.spec.metrics)

    @property
    def segment_keys(self) -> tuple[str, ...]:
        """The attributes that name a segment."""
        return self.spec.segments.by

    def rule_for(self, metric: str, *, rate: float | None = None) -> Rule:
        """The resolved rule of ``metric``.

        Args:
            metric: The metric name (need not be listed in the file).
            rate: A per-call rate (``--sample-rate``) that overrides the file.

        Returns:
            The rule: per call, then per metric, then ``defaults``, then the fallbacks.
        """
        key = (metric, rate)
        cached = self._rules.get(key)
        if cached is None:
            cached = self._rules[key] = self._resolve(metric, rate)
        return cached

    @cached_property
    def redactor(self) -> Redactor:
        """The compiled redaction rules of this policy."""
        spec = self.spec.redaction
        return Redactor(RedactionRules(kinds=spec.kinds, patterns=dict(spec.patterns),
                                       attributes=spec.attributes, id=spec.id,
                                       max_chars=spec.max_chars))

    def _resolve(self, metric: str, rate: float | None) -> Rule:
        own = self.spec.metrics.get(metric, MetricRule())
        merged = own.merge(self.spec.defaults)
        where = merged.where or {}
        depth = (merged.max_queue_depth if merged.max_queue_depth is not None
                 else self.fallbacks.max_queue_depth)
        return Rule(
            metric=metric,
            rate=rate if rate is not None else (
                merged.rate if merged.rate is not None else self.fallbacks.rate),
            where=where,
            patterns={k: p for k, c in where.items() if (p := c.compiled()) is not None},
            minimum_per_segment=merged.minimum_per_segment or 0,
            delay_s=merged.delay_s or 0.0,
            max_queue_depth=depth or None,
            shed_policy=merged.shed_policy or self.fallbacks.shed_policy,
        )


def default_policy(fallbacks: Fallbacks) -> Policy:
    """The policy in effect without a config file: the fallbacks, no filters, no minimum."""
    return Policy(spec=PolicyFile(), fallbacks=fallbacks)


def parse_policy(
    raw: bytes | str, *, source: str, fallbacks: Fallbacks,
    max_delay_s: float | None = None, known_metrics: Collection[str] | None = None,
) -> Policy:
    """Read and check a sampling config.

    Args:
        raw: The file's content, YAML or JSON.
        source: Its path, for error messages.
        fallbacks: Values below the file's ``defaults``.
        max_delay_s: Longest ``delay_s`` the broker can hold a job for (the visibility
            timeout less the longest job); None for no check.
        known_metrics: Metric names that exist; None for no check.

    Returns:
        The policy.

    Raises:
        InvalidSamplingConfig: Naming the file, the key and what is wrong.
    """
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise InvalidSamplingConfig(f"not valid YAML or JSON: {exc}", path=source) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InvalidSamplingConfig("expected a mapping at the top", path=source)
    try:
        spec = PolicyFile.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        location = ".".join(str(part) for part in error["loc"]) or None
        message = str(error["msg"]).removeprefix("Value error, ")
        raise InvalidSamplingConfig(message, path=source, location=location) from None
    _check_metrics(spec, source=source, known=known_metrics)
    _check_delays(spec, source=source, max_delay_s=max_delay_s)
    return Policy(spec=spec, fallbacks=fallbacks, source=source)


def _check_metrics(spec: PolicyFile, *, source: str, known: Collection[str] | None) -> None:
    if known is None:
        return
    for name in spec.metrics:
        if name not in known:
            raise InvalidSamplingConfig(
                f"unknown metric {name!r} (known: {', '.join(sorted(known))})",
                path=source, location=f"metrics.{name}",
            )


def _check_delays(spec: PolicyFile, *, source: str, max_delay_s: float | None) -> None:
    if max_delay_s is None:
        return
    rules = {"defaults": spec.defaults, **{f"metrics.{k}": v for k, v in spec.metrics.items()}}
    for where, rule in rules.items():
        if rule.delay_s is not None and rule.delay_s >= max_delay_s:
            raise InvalidSamplingConfig(
                f"{rule.delay_s:g} s does not fit in EVALFLEET_VISIBILITY_TIMEOUT_S less two "
                f"judge calls ({max_delay_s:g} s): the broker would hand the job out twice; "
                "raise the visibility timeout or shorten the delay",
                path=source, location=f"{where}.delay_s",
            )


def max_delay_for(settings: Settings) -> float:
    """Longest delay a job may wait at a worker before the broker hands it out again."""
    return settings.broker.visibility_timeout_s - 2 * settings.judge.judge_timeout_s
