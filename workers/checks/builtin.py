"""The built-in checks: plain functions from a text and a check's parameters to a result.

Every one runs in time linear in its text: JSON is read by orjson (which refuses more
than 1,024 levels rather than recursing), patterns and normalisation use RE2, and a
schema is validated only up to :data:`MAX_SCHEMA_INSTANCE_CHARS`. Text that is not
valid UTF-8 (an unpaired surrogate) is read with the bad character replaced.
"""

from __future__ import annotations

import functools
import math
import re
import sys
import unicodedata
from collections.abc import Callable
from typing import Any

import orjson

from evalfleet.core.checkspec import (
    Contains,
    Equals,
    JsonEquals,
    JsonSchema,
    JsonValid,
    Length,
    Numeric,
    Pattern,
    Similar,
    SqlValid,
)
from evalfleet.core.regex import LinearPattern, compile_linear
from evalfleet.core.tokens import estimate_tokens
from workers.checks.comparison import json_equals, similar
from workers.checks.result import TOO_LARGE, CheckResult
from workers.checks.schema import SchemaValidator
from workers.checks.sql import sql_valid

#: Largest JSON document a schema check validates, in characters: validating is
#: pure Python, some microseconds a value, and one job must not hold a thread for long.
MAX_SCHEMA_INSTANCE_CHARS = 1_000_000

# Python's re for numbers: RE2's Python binding costs tens of microseconds a match when
# a function makes the replacement (120 s for a 10 MB text of numbers, against 1 s),
# and this fixed pattern has no nested repetition, so it cannot backtrack far.
_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?")

@functools.cache
def _punctuation() -> dict[int, None]:
    """Every Unicode punctuation character (categories P*), to delete with translate:
    RE2's Python binding is as slow at ``sub`` with many matches."""
    return {code: None for code in range(sys.maxunicode + 1)
            if unicodedata.category(chr(code)).startswith("P")}

#: A prepared check: the value's text in, the result out.
CheckFunction = Callable[[str, "str | None"], CheckResult]


def prepare(spec: Any, *, schema: Any = None) -> CheckFunction:
    """The function that runs built-in check ``spec`` (patterns and schema compiled once).

    Args:
        spec: A built-in check's spec (not a team check).
        schema: For ``json_schema``: the schema, read from its file when it has one.

    Returns:
        A function of the checked text and the reference text (None when missing).
    """
    if isinstance(spec, JsonValid):
        return lambda text, _: _json_valid(text)
    if isinstance(spec, JsonSchema):
        validator = SchemaValidator(schema)
        return lambda text, _: _json_schema(text, validator)
    if isinstance(spec, Pattern):
        compiled = compile_linear(spec.pattern)
        wanted = spec.check == "matches"
        return lambda text, _: _pattern(text, compiled, spec.pattern, wanted=wanted)
    if isinstance(spec, Equals):
        return lambda text, reference: _equals(text, reference, spec)
    if isinstance(spec, Contains):
        return lambda text, _: _contains(text, spec)
    if isinstance(spec, Numeric):
        return lambda text, reference: _numeric(text, reference, spec)
    if isinstance(spec, Length):
        return lambda text, _: _length(text, spec)
    if isinstance(spec, Similar):
        return lambda text, reference: _similar(text, reference, spec)
    if isinstance(spec, JsonEquals):
        return lambda text, reference: json_equals(
            utf8_safe(text), utf8_safe(_expected(reference, spec.value)), spec)
    if isinstance(spec, SqlValid):
        return lambda text, _: sql_valid(utf8_safe(text), spec)
    raise TypeError(f"not a built-in check: {type(spec).__name__}")


def utf8_safe(text: str) -> str:
    """``text``, with any unpaired surrogate (text that was not valid UTF-8) replaced."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


def _json_valid(text: str) -> CheckResult:
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        return CheckResult.scored(False, f"not valid JSON: {exc}")
    return CheckResult.scored(True, "valid JSON")


def _json_schema(text: str, validator: SchemaValidator) -> CheckResult:
    if len(text) > MAX_SCHEMA_INSTANCE_CHARS:
        return CheckResult.failure(TOO_LARGE, f"{len(text):,} characters, over the "
                                   f"{MAX_SCHEMA_INSTANCE_CHARS:,} a schema check reads")
    try:
        document = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        return CheckResult.scored(False, f"not valid JSON: {exc}")
    return validator.check(document)


def _pattern(text: str, compiled: LinearPattern, source: str, *, wanted: bool) -> CheckResult:
    found = compiled.search(utf8_safe(text))
    if found is None:
        return CheckResult.scored(not wanted, f"no match of the pattern {source}")
    # The offset, never the matched text: the pattern may be looking for a secret.
    return CheckResult.scored(wanted, f"the pattern {source} matches at offset {found.start()}")


def normalise(text: str, steps: tuple[str, ...]) -> str:
    """``text`` made comparable: numbers written one way, punctuation dropped, case
    folded, whitespace runs made one space; each only when ``steps`` names it."""
    text = utf8_safe(text)
    if "numbers" in steps:
        text = _NUMBER.sub(_number_match, text)
    if "punctuation" in steps:
        text = text.translate(_punctuation())
    if "case" in steps:
        text = text.casefold()
    if "whitespace" in steps:
        text = " ".join(text.split())
    return text


def _number_match(match: re.Match[str]) -> str:
    return _number_text(match.group(0))


@functools.lru_cache(maxsize=65_536)
def _number_text(written: str) -> str:
    value = _to_float(written)
    if value is None:
        return written
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


def _equals(text: str, reference: str | None, spec: Equals) -> CheckResult:
    expected = _expected(reference, spec.value)
    if normalise(text, spec.normalise) == normalise(expected, spec.normalise):
        return CheckResult.scored(True, "equals the reference" + _after(spec.normalise))
    return CheckResult.scored(False, "differs from the reference" + _after(spec.normalise))


def _expected(reference: str | None, value: str | None) -> str:
    expected = value if value is not None else reference
    assert expected is not None  # the runner fails a check whose reference is missing
    return expected


def _similar(text: str, reference: str | None, spec: Similar) -> CheckResult:
    expected = _expected(reference, spec.value)
    return similar(text, expected, spec, normalised=(
        normalise(text, spec.normalise), normalise(expected, spec.normalise)))


def _after(steps: tuple[str, ...]) -> str:
    return f" (normalised: {', '.join(steps)})" if steps else ""


def _contains(text: str, spec: Contains) -> CheckResult:
    text = normalise(text, spec.normalise)
    found = [value for value in spec.values if normalise(value, spec.normalise) in text]
    missing = [value for value in spec.values if value not in found]
    if spec.check == "contains_all":
        passed = not missing
        reason = "contains all" if passed else f"lacks {_listed(missing)}"
    else:
        passed = bool(found)
        reason = f"contains {_listed(found)}" if passed else "contains none"
    return CheckResult.scored(passed, reason + f" of {len(spec.values)}")


def _listed(values: list[str]) -> str:
    shown = ", ".join(repr(value[:40]) for value in values[:5])
    return shown + (f" and {len(values) - 5} more" if len(values) > 5 else "")


def _numeric(text: str, reference: str | None, spec: Numeric) -> CheckResult:
    expected_text = spec.value if spec.value is not None else reference
    assert expected_text is not None
    value, expected = last_number(text), last_number(expected_text)
    if expected is None:
        return CheckResult.scored(False, "the reference holds no number")
    if value is None:
        return CheckResult.scored(False, "holds no number")
    allowed = max(spec.tolerance, spec.relative * abs(expected))
    difference = abs(value - expected)
    # At the bound itself, as written: 41.9 is 0.1 from 42 though the floats differ.
    passed = difference <= allowed or math.isclose(difference, allowed, rel_tol=1e-9)
    relation = "within" if passed else "beyond"
    return CheckResult.scored(passed, f"{value:g} is {difference:g} from {expected:g}, "
                              f"{relation} the tolerance of {allowed:g}")


def last_number(text: str) -> float | None:
    """The last finite number written in ``text`` (``1,000.5`` reads 1000.5), or None."""
    value = None
    for match in _NUMBER.finditer(utf8_safe(text)):
        number = _to_float(match.group(0))
        if number is not None:
            value = number
    return value


def _to_float(written: str) -> float | None:
    try:
        value = float(written.replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _length(text: str, spec: Length) -> CheckResult:
    size = len(text) if spec.count == "characters" else estimate_tokens(text)
    low = spec.min if spec.min is not None else 0
    high = spec.max if spec.max is not None else math.inf
    passed = low <= size <= high
    bounds = f"{low:,}..{high:,}" if spec.max is not None else f"at least {low:,}"
    return CheckResult.scored(
        passed, f"{size:,} {spec.count}, {'within' if passed else 'outside'} {bounds}")
