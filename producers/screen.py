"""One record from raw input to a sample picked for some metrics, or a clear no. Pure
but for the segment counts it updates.

The steps, in order: decode and validate the record (``evalfleet.core.sample``), check
field sizes (:mod:`producers.limits`), apply the sampling policy
(:mod:`producers.selector`), check each picked metric's inputs, and redact PII
(:mod:`producers.redact`). Each record ends as one of :class:`Admitted`,
:class:`SampledOut` or :class:`Rejected`, plain values the sources turn into
counts, messages or HTTP answers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from evalfleet.core.errors import InvalidSample
from evalfleet.core.metric import Metric
from evalfleet.core.sample import Sample, check_structure, parse_sample, parse_sample_line
from producers.limits import FieldLimits, check_limits
from producers.policy import Policy
from producers.quota import SegmentQuota
from producers.redact import redact_sample
from producers.selector import Pick, select


class OversizedLine(bytes):
    """The empty stand-in for a line too long to read (a file, standard input or a
    followed log): the screen rejects it naming its line; blank-line filters keep it."""

    size_bytes: int
    """The line's length."""

    def __new__(cls, size_bytes: int) -> OversizedLine:
        """A stand-in for a line of ``size_bytes``."""
        line = super().__new__(cls, b"")
        line.size_bytes = size_bytes
        return line


@dataclass(frozen=True, slots=True)
class Keyed:
    """A record whose sampling is decided on a key other than its id (the trace id of
    a sample built from one span of a trace, so all samples of a trace agree)."""

    data: Mapping[str, Any]
    """The decoded record."""
    sampling_key: str
    """What the rate is applied to."""


@dataclass(frozen=True, slots=True)
class Admitted:
    """A valid sample picked for at least one metric."""

    record: str
    """Where it came from (``line 9``, ``samples[3]``)."""
    sample: Sample
    """The sample (redacted once :meth:`Screen.redact` ran)."""
    segment: str
    """Its segment label."""
    picks: tuple[Pick, ...]
    """The metrics it is kept for, inputs checked."""
    errors: tuple[InvalidSample, ...] = ()
    """Picked metrics whose inputs it lacks (the other metrics go on)."""
    redactions: Mapping[str, int] | None = None
    """Matches redacted, per kind; None until redacted."""
    sampling_key: str | None = None
    """The key it was sampled on when not its id (a trace id), for a lowered rate."""


@dataclass(frozen=True, slots=True)
class SampledOut:
    """A valid sample that no metric keeps."""

    record: str
    """Where it came from."""
    sample_id: str
    """Its id."""
    segment: str
    """Its segment label."""


@dataclass(frozen=True, slots=True)
class Rejected:
    """A record that cannot be used."""

    record: str
    """Where it came from."""
    errors: tuple[InvalidSample, ...]
    """What is wrong: the format or a size (one error), or every picked metric's inputs."""
    valid: bool = False
    """True when the record is a valid sample that only lacks metric inputs."""


Screening = Admitted | SampledOut | Rejected


class Screen:
    """Applies the checks and the policy to records. Thread-safe."""

    def __init__(self, *, metrics: Mapping[str, Metric], limits: FieldLimits,
                 quota: SegmentQuota) -> None:
        """Screen against these metric definitions and limits.

        Args:
            metrics: Metric definitions by name (to check their inputs).
            limits: Field size limits.
            quota: Segment counts for the policy's minimums.
        """
        self._metrics = metrics
        self._limits = limits
        self._quota = quota

    @property
    def metric_names(self) -> frozenset[str]:
        """The metrics this screen knows."""
        return frozenset(self._metrics)

    def admit(
        self, raw: bytes | Mapping[str, Any] | Sample | Any, *, record: str, policy: Policy,
        metrics: Sequence[str], now_s: float, rate: float | None = None,
    ) -> Screening:
        """Validate ``raw`` and pick the metrics that keep it (no redaction yet).

        Args:
            raw: A JSONL line (bytes), decoded JSON, a :class:`Sample`, or decoded JSON
                with its sampling key (:class:`Keyed`).
            record: Where it came from, for errors.
            policy: The sampling policy in effect.
            metrics: The metrics asked for.
            now_s: Current time, seconds since the epoch (segment windows).
            rate: A per-call rate overriding the policy's.

        Returns:
            Admitted, SampledOut or Rejected.
        """
        sampling_key = raw.sampling_key if isinstance(raw, Keyed) else None
        try:
            sample = self._parse(raw.data if isinstance(raw, Keyed) else raw, record=record)
            check_limits(sample, limits=self._limits, record=record)
        except InvalidSample as exc:
            return Rejected(record=record, errors=(exc,))
        except Exception as exc:  # one odd record never ends its batch
            return Rejected(record=record, errors=(
                InvalidSample(f"cannot be read ({type(exc).__name__})", record=record),))
        if self._quota.max_tracked != policy.spec.segments.max_tracked:
            self._quota.resize(policy.spec.segments.max_tracked)
        selection = select(sample_id=sampling_key or sample.id, attributes=sample.attributes,
                           metrics=metrics, policy=policy, quota=self._quota, now_s=now_s,
                           rate=rate)
        if not selection.picks:
            return SampledOut(record=record, sample_id=sample.id, segment=selection.segment)
        picks, errors = self._check_inputs(sample, selection.picks, record=record)
        if not picks:
            return Rejected(record=record, errors=errors, valid=True)
        return Admitted(record=record, sample=sample, segment=selection.segment,
                        picks=picks, errors=errors, sampling_key=sampling_key)

    def redact(self, admitted: Admitted, *, policy: Policy) -> Admitted:
        """``admitted`` with PII redacted by the policy's rules and the matches counted."""
        sample, counts = redact_sample(admitted.sample, redactor=policy.redactor)
        return replace(admitted, sample=sample, redactions=counts)

    def _parse(self, raw: Any, *, record: str) -> Sample:
        if isinstance(raw, Sample):
            # Built in the caller's process, never through the record checks.
            problem = check_structure(raw.model_dump(), limits=self._limits.structure)
            if problem is not None:
                raise InvalidSample(problem[1], record=record, field=problem[0])
            return raw
        if isinstance(raw, OversizedLine):
            raise InvalidSample(f"a line of {raw.size_bytes:,} bytes is too long to read; "
                                "it was skipped", record=record)
        if isinstance(raw, bytes):
            return parse_sample_line(raw, record=record, limits=self._limits.structure)
        return parse_sample(raw, record=record, limits=self._limits.structure)

    def _check_inputs(self, sample: Sample, picks: Sequence[Pick], *,
                      record: str) -> tuple[tuple[Pick, ...], tuple[InvalidSample, ...]]:
        kept: list[Pick] = []
        errors: list[InvalidSample] = []
        for pick in picks:
            try:
                self._metrics[pick.metric].check_inputs(sample)
            except InvalidSample as exc:
                errors.append(InvalidSample(f"{exc.reason} ({pick.metric})", record=record,
                                            sample_id=sample.id, field=exc.field))
                continue
            kept.append(pick)
        return tuple(kept), tuple(errors)
