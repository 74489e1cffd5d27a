"""Check a decoded verdict against its metric and turn it into a :class:`Verdict`. Pure.

Values are coerced only where the meaning cannot be mistaken: ``"0.8"``,
``"80%"`` and ``"8/10"`` on a 0..1 scale, ``4.0`` or ``"4/5"`` for an integer
scored out of 5, ``"true"`` for a boolean. Everything else that does not fit is
rejected with a message naming the field: out-of-range values (never clamped,
never rescaled), NaN and infinities, booleans given as numbers, numbers given
as booleans. A score is never defaulted.

Only scores are fail-closed. Fields that are not scores (explanations, comments,
``extracted_answer``, ``error_type``, ``reason``...) are annotations: a missing or
off-spec annotation never rejects a verdict; it is kept as the judge wrote it and
named in the verdict's notes. A second judge call for a stray ``error_type`` would
cost as much as the first and lose a verdict whose scores were clear.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from evalfleet.core.metric import FieldSpec, Metric
from evalfleet.core.sample import Sample
from workers.verdicts.result import RawValue, Verdict

# ASCII digits only: \d would also take Arabic-Indic or Devanagari digits, which
# float() reads, and "only unambiguous coercions" allows ASCII and full-width ones.
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_PERCENT = re.compile(rf"({_NUMBER.pattern})\s*%")
_FRACTION = re.compile(rf"({_NUMBER.pattern})\s*/\s*({_NUMBER.pattern})")

# Full-width digits and the signs around numbers, folded to ASCII. Not NFKC: it also
# turns superscripts, subscripts and circled digits (¹/₂, ③) into digits.
_FULL_WIDTH = str.maketrans({**{chr(0xFF10 + n): str(n) for n in range(10)},
                             "\uff0e": ".", "\uff0b": "+", "\uff0d": "-", "\uff05": "%",
                             "\uff0f": "/", "\uff45": "e", "\uff25": "E", "\u3000": " "})
_NON_FINITE = {"nan", "inf", "infinity"}

#: What judges write for "no value" in a score, once trimmed and lowercased; read as null
#: (and then allowed only where the score may be null).
NULL_MARKERS = frozenset({"", "n/a", "none", "null"})

#: Field types that carry a score's value.
_SCORE_TYPES = ("number", "integer", "boolean")

#: Longest piece of a judge's value quoted back in an error message, in characters.
MAX_QUOTED = 40


@dataclass(frozen=True)
class Invalid:
    """Why a value does not fit its field."""

    reason: str
    """What is wrong, e.g. ``1.3 is above the maximum 1.0``."""


def coerce_value(
    value: Any, spec: FieldSpec, *, sample: Sample, declared_failure: bool = False,
) -> RawValue | Invalid:
    """Coerce one verdict value to its field's declared type.

    Args:
        value: The decoded value (None for JSON null).
        spec: The field's declaration.
        sample: The judged sample (for ``id`` fields and the reference rule).
        declared_failure: True for a score field of a judge-declared failure:
            null is always allowed and the range is not checked, but a number
            must still be finite.

    Returns:
        The coerced value, or :class:`Invalid` saying what is wrong.
    """
    if value is None:
        return _null(spec, sample=sample, lenient=declared_failure)
    if _is_null_marker(value, spec):
        null = _null(spec, sample=sample, lenient=declared_failure)
        return Invalid(f"{show(value)} means null: {null.reason}") if isinstance(
            null, Invalid) else null
    must_be_null = spec.nullable == "when_reference_missing" and reference_missing(sample)
    if must_be_null and not declared_failure:
        return Invalid(f"{show(value)} given, but the sample has no reference: it must be null")
    if spec.type in ("number", "integer"):
        return _number(value, spec, check_range=not declared_failure)
    if spec.type == "boolean":
        return _boolean(value)
    if spec.type == "enum":
        return _enum(value, spec)
    if spec.type == "id":
        return _identifier(value, sample=sample)
    if isinstance(value, str):
        return value
    return Invalid(f"expected a string, got {describe(value)}")


def coerce_verdict(data: dict[str, Any], *, metric: Metric, sample: Sample) -> Verdict | list[str]:
    """Check a decoded verdict object against ``metric`` and build the verdict.

    Unknown keys are ignored. A judge-declared failure (the metric's ``failure``
    field equal to its failure value) is a valid verdict whose scores are null;
    its score fields may be null or absent, and are only checked to be finite.
    Problems with annotations (see :func:`strict_fields`) become notes, not errors.

    Args:
        data: The verdict object, keys as the judge wrote them.
        metric: The metric it must satisfy.
        sample: The judged sample.

    Returns:
        The verdict, or one message per problem with a score (``field 'x': ...``).
    """
    output = metric.spec.output
    score_fields = {score.source for score in metric.spec.scores.values()}
    strict = strict_fields(metric)
    judge_failure = _declares_failure(data, metric=metric, sample=sample)
    fields: dict[str, RawValue] = {}
    errors: list[str] = []
    notes: list[str] = []
    for name, spec in output.fields.items():
        lenient = judge_failure and name in score_fields
        problems = errors if name in strict else notes
        fields[name] = None
        if name not in data:
            if spec.required and not lenient:
                problems.append(f"field {name!r} is missing")
            continue
        coerced = coerce_value(data[name], spec, sample=sample, declared_failure=lenient)
        if isinstance(coerced, Invalid):
            problems.append(f"field {name!r}: {coerced.reason}")
            fields[name] = _verbatim(data[name])
        else:
            fields[name] = coerced
    if errors:
        return errors
    return _build(fields, metric=metric, judge_failure=judge_failure, notes=tuple(notes))


def strict_fields(metric: Metric) -> frozenset[str]:
    """The verdict fields that fail closed: every score's source, the id, the failure status.

    Args:
        metric: The metric.

    Returns:
        Field names whose problems reject a verdict; every other field is an annotation.
    """
    output = metric.spec.output
    names = {score.source for score in metric.spec.scores.values()}
    names.update(name for name, spec in output.fields.items() if spec.type == "id")
    if output.failure is not None:
        names.add(output.failure.field)
    return frozenset(names)


def reference_missing(sample: Sample) -> bool:
    """Whether the sample has no reference answer, as seed 004 defines it.

    Args:
        sample: The judged sample.

    Returns:
        True when the reference is null, or blank or ``none`` (any case) once trimmed.
    """
    return sample.reference is None or sample.reference.strip().lower() in ("", "none")


def show(value: Any) -> str:
    """A judge's value as it reads in JSON, shortened for an error message.

    Args:
        value: A decoded value.

    Returns:
        JSON text (``1.3``, ``"x"``, ``NaN``), strings cut at :data:`MAX_QUOTED`
        characters, containers named rather than shown.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, str) and len(value) > MAX_QUOTED:
        value = value[:MAX_QUOTED] + "..."
    if isinstance(value, dict | list):
        return "an object" if isinstance(value, dict) else "an array"
    return json.dumps(value, ensure_ascii=False)


def describe(value: Any) -> str:
    """The JSON kind of a value with the value itself, for "expected ..., got ..." messages.

    Args:
        value: A decoded value.

    Returns:
        ``a string "x"``, ``a number 1``, ``a boolean true``, ``null``, ``an object``...
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean {show(value)}"
    if isinstance(value, int | float):
        return f"a number {show(value)}"
    if isinstance(value, str):
        return f"a string {show(value)}"
    return show(value)


def _is_null_marker(value: Any, spec: FieldSpec) -> bool:
    return (spec.type in _SCORE_TYPES and isinstance(value, str)
            and value.strip().lower() in NULL_MARKERS)


def _verbatim(value: Any) -> RawValue:
    """An off-spec annotation as the judge wrote it: text stays text, the rest is JSON."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _null(spec: FieldSpec, *, sample: Sample, lenient: bool) -> RawValue | Invalid:
    # An optional field written as null is the same as an absent one; strict JSON
    # schemas must list every key, so judges send null for the ones they skip.
    if lenient or spec.nullable == "allowed" or not spec.required:
        return None
    if spec.nullable == "when_reference_missing":
        if reference_missing(sample):
            return None
        return Invalid("null, but the sample has a reference: a score is required")
    return Invalid("null is not allowed")


def _number(value: Any, spec: FieldSpec, *, check_range: bool) -> RawValue | Invalid:
    if isinstance(value, bool):
        return Invalid(f"{show(value)} is a boolean, not a number")
    if isinstance(value, str):
        parsed = _number_from_text(value, spec)
        if isinstance(parsed, Invalid):
            return parsed
    elif isinstance(value, int | float):
        parsed = _as_float(value)
    else:
        return Invalid(f"expected a number, got {describe(value)}")
    if parsed is None or not math.isfinite(parsed):
        return Invalid(f"{show(value)} is not a finite number")
    if spec.type == "integer":
        if not parsed.is_integer():
            return Invalid(f"{show(value)} is not a whole number")
        return _in_range(int(parsed), value, spec) if check_range else int(parsed)
    return _in_range(parsed, value, spec) if check_range else parsed


def _as_float(value: int | float) -> float | None:
    try:
        return float(value)
    except OverflowError:  # an integer too large for a float
        return None


def fold_digits(text: str) -> str:
    """``text`` with full-width digits, signs, ``.``, ``%`` and ``/`` as ASCII, stripped."""
    return text.translate(_FULL_WIDTH).strip()


def _number_from_text(text: str, spec: FieldSpec) -> float | Invalid | None:
    bare = fold_digits(text)
    if _NUMBER.fullmatch(bare):
        return float(bare)
    if bare.lower().lstrip("+-") in _NON_FINITE:
        return None
    unit = spec.minimum == 0 and spec.maximum == 1
    if (match := _PERCENT.fullmatch(bare)) is not None:
        if not unit:
            return Invalid(f"{show(text)}: a percentage is only accepted on a 0 to 1 scale")
        return float(match.group(1)) / 100
    if (match := _FRACTION.fullmatch(bare)) is not None:
        numerator, denominator = float(match.group(1)), float(match.group(2))
        if not (math.isfinite(numerator) and math.isfinite(denominator)):
            return None  # 5/1e999 is not 0.0
        if denominator <= 0:
            return Invalid(f"{show(text)} has no valid denominator")
        if unit:
            return numerator / denominator
        if denominator == spec.maximum:
            return numerator
        return Invalid(f"{show(text)}: a fraction must be out of the maximum {spec.maximum:g}")
    return Invalid(f"{show(text)} is not a number")


def _in_range(number: float | int, original: Any, spec: FieldSpec) -> RawValue | Invalid:
    assert spec.minimum is not None and spec.maximum is not None  # checked by FieldSpec
    written = show(original)
    if isinstance(original, str):
        written = f"{written} ({_bound(number, spec)})"
    if number > spec.maximum:
        return Invalid(f"{written} is above the maximum {_bound(spec.maximum, spec)}")
    if number < spec.minimum:
        return Invalid(f"{written} is below the minimum {_bound(spec.minimum, spec)}")
    return number


def _bound(number: float, spec: FieldSpec) -> str:
    return str(int(number)) if spec.type == "integer" else repr(float(number))


def _boolean(value: Any) -> RawValue | Invalid:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return Invalid(f"expected true or false, got {describe(value)}")


def _enum(value: Any, spec: FieldSpec) -> RawValue | Invalid:
    if isinstance(value, str):
        wanted = value.strip().lower()
        for allowed in spec.values:
            if allowed.lower() == wanted:
                return allowed
    allowed_list = ", ".join(spec.values)
    return Invalid(f"{show(value)} is not one of {allowed_list}")


def _identifier(value: Any, *, sample: Sample) -> RawValue | Invalid:
    # The judge may echo the id as a number (17 for "17"); a float (17.0) or a
    # boolean is not the id.
    if isinstance(value, str | int) and not isinstance(value, bool) and str(value) == sample.id:
        return sample.id
    return Invalid(f"{show(value)} does not match the sample id {show(sample.id)}")


def _declares_failure(data: dict[str, Any], *, metric: Metric, sample: Sample) -> bool:
    failure = metric.spec.output.failure
    if failure is None or failure.field not in data:
        return False
    status = coerce_value(
        data[failure.field], metric.spec.output.fields[failure.field], sample=sample,
    )
    return isinstance(status, str) and status.lower() == failure.equals.lower()


def _build(
    fields: dict[str, RawValue], *, metric: Metric, judge_failure: bool, notes: tuple[str, ...],
) -> Verdict | list[str]:
    scores: dict[str, float | None] = {}
    raw_scores: dict[str, RawValue] = {}
    errors: list[str] = []
    for name, score in metric.spec.scores.items():
        raw = None if judge_failure else fields[score.source]
        normalised = _normalise(raw, score.scale)
        if isinstance(normalised, Invalid):
            errors.append(f"score {name!r}: {normalised.reason}")
            continue
        scores[name], raw_scores[name] = normalised, raw
    if errors:
        return errors
    return Verdict(
        fields=fields, scores=scores, raw_scores=raw_scores,
        reason=_reason(fields, metric=metric, judge_failure=judge_failure),
        judge_failure=judge_failure, notes=notes,
    )


def _normalise(raw: RawValue, scale: tuple[float, float]) -> float | Invalid | None:
    if raw is None:
        return None
    if isinstance(raw, bool):
        return 1.0 if raw else 0.0
    low, high = scale
    if not isinstance(raw, int | float) or high <= low:
        return Invalid(f"{show(raw)} cannot be scaled to {low:g}..{high:g}")
    normalised = (raw - low) / (high - low)
    # A metric whose scale disagrees with its field's range must not store a
    # score outside 0..1; the verdict is rejected instead.
    if not 0.0 <= normalised <= 1.0:
        return Invalid(f"{show(raw)} is outside the scale {low:g}..{high:g}")
    return normalised


def _reason(fields: dict[str, RawValue], *, metric: Metric, judge_failure: bool) -> str | None:
    output = metric.spec.output
    names = output.reason_fields
    if judge_failure and output.failure is not None:
        names = output.failure.reason_fields
    texts = [
        (name, value.strip()) for name in names
        if isinstance(value := fields.get(name), str) and value.strip()
    ]
    if not texts:
        return None
    if len(names) == 1:
        return texts[0][1]
    return "\n".join(f"{name}: {text}" for name, text in texts)
