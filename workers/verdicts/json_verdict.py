"""Read a JSON verdict from a judge's reply. Pure.

Every candidate region the scan finds is decoded (strict JSON first, then a
repair library for the usual slips: Python literals, single or smart quotes,
trailing commas, comments, unescaped quotes and newlines), unwrapped when the
judge wrapped its verdict (a one-item array, a double-encoded string, an object
under one key) and validated against the metric. Only candidates that validate
count: one distinct verdict is accepted, two different ones are ambiguous.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from json_repair import repair_json

from evalfleet.core.metric import Metric
from evalfleet.core.sample import Sample
from workers.verdicts.coerce import coerce_verdict, show
from workers.verdicts.result import ParseFailure, Verdict
from workers.verdicts.scan import (
    Region,
    object_pairs,
    raw_value,
    same_value,
    scan_json,
    scan_strict_object,
)

#: Deepest bracket nesting read as a verdict. Verdicts nest two or three levels;
#: deeper regions are not verdicts, and repairing them costs seconds.
MAX_DEPTH = 16

#: Longest text value quoted when two verdicts differ in it, in characters.
MAX_SHOWN = 20

#: Most candidate regions read from one reply. A reply with more is refused whole
#: (fail closed) rather than read in time that grows with the number of candidates.
MAX_CANDIDATES = 256

#: A number as a judge may write it unquoted; anything else a repair library
#: turned into a number (``80%`` -> 80, ``0. 8`` -> 0.0) is checked as text instead.
_NUMBER_TOKEN = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|-?Infinity|NaN")


@dataclass(frozen=True)
class _Decoded:
    """A decoded region and, when a repair library read it, the text it read."""

    value: Any
    repaired_from: str | None


@dataclass(frozen=True)
class _Candidate:
    """One decoded object, with the values as written when it went through repair."""

    data: dict[str, Any]
    written: dict[str, str] | None


@dataclass(frozen=True)
class _Rejected:
    """A candidate that is a verdict attempt but breaks the schema."""

    problems: list[str]
    known_keys: int


class _DuplicateKeyError(ValueError):
    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(key)


def parse_json_verdict(text: str, *, metric: Metric, sample: Sample) -> Verdict | ParseFailure:
    """Find the one valid JSON verdict in ``text``.

    Args:
        text: The judge's reply (finish reason already checked).
        metric: The metric whose output spec the verdict must satisfy.
        sample: The judged sample (id and reference rules).

    Returns:
        The verdict, or the failure: ``empty``, ``truncated``, ``no_verdict``,
        ``schema`` or ``ambiguous``.
    """
    scan = scan_strict_object(text) or scan_json(text)
    if not scan.visible:
        return ParseFailure("empty", "the reply is empty apart from reasoning")
    if scan.truncated:
        return ParseFailure("truncated", "the reply ends inside a JSON object that never closes")
    if len(scan.regions) > MAX_CANDIDATES:
        return ParseFailure("schema", f"the reply holds {len(scan.regions):,} JSON regions, "
                                      f"more than the {MAX_CANDIDATES} read; send one verdict")
    valid: list[Verdict] = []
    rejected: list[tuple[int, _Rejected]] = []
    for number, region in enumerate(scan.regions, 1):
        outcome = _judge_region(region, metric=metric, sample=sample)
        if isinstance(outcome, _Rejected):
            rejected.append((number, outcome))
        elif outcome is not None:
            valid.extend(outcome)
            if _distinct_count(valid) > 1:
                break  # ambiguous already: reading more candidates cannot change that
    if valid:
        return _single(valid)
    if rejected:
        return _schema_failure(rejected)
    return ParseFailure("no_verdict", "the reply holds no JSON object")


def _judge_region(
    region: Region, *, metric: Metric, sample: Sample,
) -> list[Verdict] | _Rejected | None:
    """The verdicts one region yields; None when it is not a verdict attempt at all."""
    if region.depth > MAX_DEPTH:
        return _Rejected([f"brackets nested more than {MAX_DEPTH} levels deep"], known_keys=0)
    decoded = _decode(region.text, region=region, fields=metric.spec.output.fields.keys())
    if decoded is None or isinstance(decoded, _Rejected):
        return decoded
    candidate = _unwrap_array(decoded)
    if candidate is None or isinstance(candidate, _Rejected):
        return candidate
    return _validate_or_nested(candidate, metric=metric, sample=sample)


def _decode(
    text: str, *, region: Region | None, fields: Iterable[str],
) -> _Decoded | _Rejected | None:
    """Decode a region: strict JSON, then a double-encoded string, then repair."""
    try:
        return _Decoded(json.loads(text, object_pairs_hook=_reject_duplicates), repaired_from=None)
    except _DuplicateKeyError as exc:
        return _duplicate(exc.key, text, fields=fields)
    except (ValueError, RecursionError):
        pass
    unescaped = _unescape(text)
    if unescaped is not None:
        inner = scan_json(unescaped).regions
        if not inner or inner[0].depth > MAX_DEPTH:
            return None
        return _decode(inner[0].text, region=inner[0], fields=fields)
    if region is None:
        found = scan_json(text).regions
        region = found[0] if found else None
    if region is not None and region.duplicate is not None:
        return _duplicate(region.duplicate.key, text, fields=fields)
    try:
        value = repair_json(text, return_objects=True, skip_json_loads=True)
    except Exception:  # the library's failure modes are not a documented set
        return None
    return _Decoded(value, repaired_from=text)


def _duplicate(key: str, text: str, *, fields: Iterable[str]) -> _Rejected:
    known = len(set(object_pairs(text)) & set(fields))
    return _Rejected([f"duplicate key {key!r} with different values"], known_keys=max(known, 1))


def _unwrap_array(decoded: _Decoded) -> _Candidate | _Rejected | None:
    value, source = decoded.value, decoded.repaired_from
    if isinstance(value, dict):
        return _Candidate(value, object_pairs(source) if source is not None else None)
    if not isinstance(value, list) or not any(isinstance(item, dict) for item in value):
        return None  # "[1]", "[A]", a bare word: prose, not a verdict attempt
    if len(value) > 1:
        return _Rejected(
            [f"an array of {len(value)} items where one verdict object is expected"],
            known_keys=0,
        )
    # The item's own text: everything after the array's opening bracket.
    return _Candidate(value[0], object_pairs(source[1:]) if source is not None else None)


def _validate_or_nested(
    candidate: _Candidate, *, metric: Metric, sample: Sample,
) -> list[Verdict] | _Rejected:
    outcome = _validate(candidate, metric=metric, sample=sample)
    if isinstance(outcome, Verdict):
        return [outcome]
    # The judge may wrap its verdict: {"verdict": {...}}, {"result": "{...}"}.
    # Only when the outer object fails and a nested one validates.
    nested = [
        result for inner in _nested(candidate)
        if isinstance(result := _validate(inner, metric=metric, sample=sample), Verdict)
    ]
    return nested or outcome


def _nested(candidate: _Candidate) -> list[_Candidate]:
    found = []
    for key, value in candidate.data.items():
        written = (candidate.written or {}).get(key)
        inner: Any = value
        if isinstance(value, list) and len(value) == 1:
            inner = value[0]
        if isinstance(inner, dict):
            found.append(_Candidate(inner, object_pairs(written) if written else None))
        elif isinstance(inner, str) and inner.strip().startswith("{"):
            decoded = _decode(inner.strip(), region=None, fields=())
            if isinstance(decoded, _Decoded) and isinstance(decoded.value, dict):
                source = decoded.repaired_from
                found.append(_Candidate(decoded.value, object_pairs(source) if source else None))
    return found


def _validate(candidate: _Candidate, *, metric: Metric, sample: Sample) -> Verdict | _Rejected:
    data = _as_written(candidate, metric=metric)
    outcome = coerce_verdict(data, metric=metric, sample=sample)
    if isinstance(outcome, Verdict):
        return outcome
    known = sum(1 for key in data if key in metric.spec.output.fields)
    return _Rejected(outcome, known_keys=known)


def _as_written(candidate: _Candidate, *, metric: Metric) -> dict[str, Any]:
    """The candidate with repaired numbers replaced by the judge's own text.

    A repair library reads ``80%`` as 80 and ``0. 8`` as 0.0; a score must come
    from what the judge wrote, so such a value is checked as the text it was.
    """
    if candidate.written is None:
        return candidate.data
    data = dict(candidate.data)
    for key in metric.spec.output.fields:
        value, written = data.get(key), candidate.written.get(key)
        if written is None or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        bare = raw_value(written)
        if isinstance(bare, str) and not _NUMBER_TOKEN.fullmatch(bare):
            data[key] = bare
    return data


def _unescape(text: str) -> str | None:
    """The content of a double-encoded object (``{\\"a\\": 1}``), or None."""
    if '\\"' not in text:
        return None
    try:
        inner = json.loads(f'"{text}"')
    except (ValueError, RecursionError):
        return None
    return inner if isinstance(inner, str) and inner.lstrip().startswith(("{", "[")) else None


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data and not same_value(data[key], value):
            raise _DuplicateKeyError(key)
        data[key] = value
    return data


def _distinct(verdicts: list[Verdict]) -> list[Verdict]:
    distinct: list[Verdict] = []
    for verdict in verdicts:
        if not any(same_value(verdict.fields, seen.fields) for seen in distinct):
            distinct.append(verdict)
    return distinct


def _distinct_count(verdicts: list[Verdict]) -> int:
    # Called after each new verdict: only the newest can add a distinct one.
    return len(_distinct(verdicts[:1] + verdicts[-1:])) if len(verdicts) > 1 else len(verdicts)


def _single(verdicts: list[Verdict]) -> Verdict | ParseFailure:
    distinct = _distinct(verdicts)
    if len(distinct) == 1:
        return distinct[0]
    first, second = distinct[0], distinct[1]
    differing = next(
        (name for name in first.fields
         if not same_value(first.fields[name], second.fields.get(name))),
        next(iter(first.fields)),
    )
    one, other = first.fields[differing], second.fields[differing]
    if any(isinstance(value, str) and len(value) > MAX_SHOWN for value in (one, other)):
        difference = f"field {differing!r} differs"
    else:
        difference = f"field {differing!r}: {show(one)} vs {show(other)}"
    return ParseFailure(
        "ambiguous", f"the reply holds {len(distinct)} different verdicts ({difference})",
    )


def _schema_failure(rejected: list[tuple[int, _Rejected]]) -> ParseFailure:
    # Report the candidate that looks most like the verdict (most known keys,
    # the later one on a tie): that is the message quoted back to the judge.
    _, best = max(rejected, key=lambda item: (item[1].known_keys, item[0]))
    details = [f"candidate {number}: {'; '.join(r.problems)}" for number, r in rejected]
    return ParseFailure("schema", "; ".join(best.problems), details=details)
