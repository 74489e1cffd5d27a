"""Making rows storable before they reach the database. Pure.

PostgreSQL refuses a NUL character in text and in JSON, text that is not valid UTF-8
(an unpaired surrogate), ``NaN`` and infinities in JSON, and strings longer than a
``varchar`` column. A judge reply or an older producer's sample can hold any of these,
and a row the database refuses fails the same way on every redelivery. So text is
made storable here, once, at the store boundary:

- NUL and unpaired surrogates are written as their JSON escapes (``\\u0000``,
  ``\\udc80``): visible, six plain characters, never a silent deletion;
- non-finite numbers inside JSON become the strings ``"NaN"``, ``"Infinity"``,
  ``"-Infinity"``;
- where a value had to change in a dead letter's payload, the original is kept beside
  it as base64 of its UTF-8 JSON (surrogates passed through), so nothing is lost.

The columns of a verdict's key cannot be changed without changing the verdict's
identity: a key that is not storable makes its verdict unstorable
(:func:`key_problem`), and the worker keeps the job as a dead letter instead.
"""

from __future__ import annotations

import base64
import json
import math
import re
from dataclasses import replace
from typing import Any

from evalfleet.store.base import DeadLetter, VerdictKey, VerdictRecord

# NUL and lone surrogates: what PostgreSQL refuses in text and JSON.
_UNSTORABLE = re.compile("[\\x00\\ud800-\\udfff]")

#: Deepest nesting cleaned in place; deeper values are replaced by their text.
_MAX_DEPTH = 64

#: Widest integer stored as a JSON number, in bits; wider ones are stored as text.
_MAX_INT_BITS = 64

#: Widest integer written out in full as text (Python refuses past 4,300 digits).
_MAX_INT_BITS_AS_TEXT = 4096

#: Longest value of each key column, in characters (the schema's ``varchar`` sizes).
KEY_COLUMN_CHARS = {"sample_id": 256, "metric": 64, "prompt_version": 32, "judge_model": 128}

#: Longest error class of a dead letter or verdict, in characters.
ERROR_CLASS_CHARS = 32

#: Longest verdict status, in characters.
STATUS_CHARS = 16

#: Largest value of an ``integer`` column.
_INT4_MAX = 2**31 - 1


def storable_text(text: str) -> str:
    """``text`` with NUL and unpaired surrogates written as ``\\uXXXX`` escapes."""
    if _UNSTORABLE.search(text) is None:
        return text
    return _UNSTORABLE.sub(lambda found: f"\\u{ord(found.group(0)):04x}", text)


def storable_json(value: Any, *, _depth: int = 0) -> Any:
    """``value`` (decoded JSON) with every string and key storable and no non-finite number."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, int) and not isinstance(value, bool) and _too_wide(value):
        if value.bit_length() > _MAX_INT_BITS_AS_TEXT:
            return f"<an integer of {value.bit_length():,} bits>"
        return str(value)
    if isinstance(value, dict | list | tuple) and _depth >= _MAX_DEPTH:
        return storable_text(repr(value)[:65_536])
    if isinstance(value, list | tuple):
        return [storable_json(item, _depth=_depth + 1) for item in value]
    if isinstance(value, dict):
        return {storable_text(str(key)): storable_json(item, _depth=_depth + 1)
                for key, item in value.items()}
    if value is None or isinstance(value, bool | int | float):
        return value
    return storable_text(repr(value)[:65_536])  # not a JSON value at all


def first_unstorable(value: Any, *, path: str = "") -> str | None:
    """The path of the first value :func:`storable_json` would change, or None."""
    stack: list[tuple[str, Any, int, Any]] = [(path, value, 0, "")]
    while stack:
        where, item, depth, key = stack.pop()
        if not isinstance(key, str) or _UNSTORABLE.search(key) is not None:
            return storable_text(where)[:200]
        if isinstance(item, str):
            if _UNSTORABLE.search(item) is not None:
                return where or "value"
        elif isinstance(item, float):
            if not math.isfinite(item):
                return where or "value"
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if _too_wide(item):
                return where or "value"
        elif isinstance(item, dict | list | tuple) and depth >= _MAX_DEPTH:
            return where or "value"
        elif isinstance(item, dict):
            stack.extend(reversed([(f"{where}.{name}" if where else str(name), inner,
                                    depth + 1, name) for name, inner in item.items()]))
        elif isinstance(item, list | tuple):
            stack.extend(reversed([(f"{where}[{n}]", inner, depth + 1, "")
                                   for n, inner in enumerate(item)]))
        else:
            return where or "value"
    return None


def storable_as_is(value: Any, *, _depth: int = 0) -> bool:
    """Whether :func:`storable_json` leaves ``value`` as it is (``first_unstorable`` is
    None), without naming where: checked for every verdict stored, so kept cheap (no
    path built; ASCII text can only hold a NUL)."""
    kind = type(value)
    if kind is str:
        if value.isascii():
            return "\x00" not in value
        return _UNSTORABLE.search(value) is None
    if value is None or kind is bool:
        return True
    if kind is float:
        return math.isfinite(value)
    if kind is int:
        return not _too_wide(value)
    if kind is dict:
        return _depth < _MAX_DEPTH and all(
            isinstance(key, str) and storable_as_is(key)
            and storable_as_is(item, _depth=_depth + 1)
            for key, item in value.items())
    if kind is list or kind is tuple:
        return _depth < _MAX_DEPTH and all(
            storable_as_is(item, _depth=_depth + 1) for item in value)
    return first_unstorable(value) is None  # subclasses, other types: the full walk


def _too_wide(value: int) -> bool:
    return value.bit_length() > _MAX_INT_BITS


def key_problem(key: VerdictKey) -> str | None:
    """Which column of ``key`` the database would refuse, or None."""
    for column, limit in KEY_COLUMN_CHARS.items():
        value = getattr(key, column)
        if len(value) > limit or not storable_as_is(value):
            return column
    return None


def verdict_problem(record: VerdictRecord) -> str | None:
    """Which column of ``record`` the database would refuse even once its text is
    made storable (its key, a count out of range), or None."""
    column = key_problem(record.key)
    if column is not None:
        return column
    for name in ("attempts", "latency_ms", "prompt_tokens", "completion_tokens",
                 "cached_tokens"):
        value = getattr(record, name)
        if value is not None and not -_INT4_MAX <= value <= _INT4_MAX:
            return name
    if len(record.status) > STATUS_CHARS:
        return "status"
    if record.error_class is not None and len(record.error_class) > ERROR_CLASS_CHARS:
        return "error_class"
    if record.cost_usd is not None and not math.isfinite(record.cost_usd):
        return "cost_usd"
    return None


def storable_verdict(record: VerdictRecord) -> VerdictRecord:
    """``record`` with its text and JSON made storable (its key left as it is)."""
    if all(storable_as_is(value) for value in (
            record.error, record.reason, record.raw_output, record.raw_scores, record.scores,
            record.attributes)):
        return record
    return replace(
        record, error=_text_or_none(record.error), reason=_text_or_none(record.reason),
        raw_output=_text_or_none(record.raw_output), raw_scores=storable_json(record.raw_scores),
        scores=storable_json(record.scores), attributes=storable_json(record.attributes),
    )


def storable_dead_letter(letter: DeadLetter) -> DeadLetter:
    """``letter`` made storable; a changed payload keeps its original as base64.

    A job payload (an object) stays a job, with its text escaped, so it can be
    replayed; the original goes under ``unstorable_original``. Any other payload is
    wrapped as ``{"storable": ..., "unstorable_original": ...}``.
    """
    unstorable = first_unstorable(letter.payload, path="payload")
    payload = letter.payload
    if unstorable is not None:
        original = {"field": unstorable, "base64": encode_original(letter.payload)}
        cleaned = storable_json(letter.payload)
        payload = ({**cleaned, "unstorable_original": original} if isinstance(cleaned, dict)
                   else {"storable": cleaned, "unstorable_original": original})
    return replace(
        letter, payload=payload,
        sample_id=_column(letter.sample_id, KEY_COLUMN_CHARS["sample_id"]),
        metric=_column(letter.metric, KEY_COLUMN_CHARS["metric"]),
        error_class=storable_text(letter.error_class)[:ERROR_CLASS_CHARS],
        error=storable_text(letter.error), history=storable_json(letter.history),
    )


def encode_original(value: Any) -> str:
    """``value`` as base64 of its JSON in UTF-8, lone surrogates and NaN kept as they were."""
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return base64.b64encode(text.encode("utf-8", "surrogatepass")).decode("ascii")


def decode_original(encoded: str) -> Any:
    """The value :func:`encode_original` encoded."""
    return json.loads(base64.b64decode(encoded).decode("utf-8", "surrogatepass"))


def _text_or_none(text: str | None) -> str | None:
    return None if text is None else storable_text(text)


def _column(text: str | None, limit: int) -> str | None:
    return None if text is None else storable_text(text)[:limit]
