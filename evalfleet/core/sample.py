"""The sample record: one production interaction to be judged.

Parsing is pure: bytes in, a :class:`Sample` or an :class:`InvalidSample`
naming the record and the field out.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from evalfleet.core import jsontext
from evalfleet.core.errors import InvalidSample
from evalfleet.core.session import Session
from evalfleet.core.trajectory import Trajectory

#: Longest sample id accepted, in characters.
MAX_ID_LENGTH = 256

# C0 control characters other than tab, newline and carriage return, and lone UTF-16
# surrogates: Postgres refuses both in text and JSON, so a record holding one would be
# judged and then never stored. Rejected, not stripped: the record is changed by no one
# but its sender.
_FORBIDDEN_CHAR = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff]")

# The same characters within ASCII (surrogates are not), for the fast test below.
_FORBIDDEN_ASCII = bytes(range(0x00, 0x09)) + b"\x0b\x0c" + bytes(range(0x0e, 0x20))


@dataclass(frozen=True, slots=True)
class SampleLimits:
    """Structural limits of a sample record, checked before the record is validated."""

    max_depth: int = 16
    """Deepest nesting of arrays and objects in a record (the record itself is level 1)."""

    max_keys: int = 256
    """Most keys in any object of a record (``attributes``, ``fields`` and inside them)."""

    max_key_chars: int = 256
    """Longest key in any object of a record, in characters."""

    check_values: bool = True
    """Reject text with forbidden characters, non-finite and over-wide numbers."""


#: Widest integer a record may hold, in bits (a signed 64-bit integer and its sign).
_MAX_INT_BITS = 64

#: The limits producers apply unless configured otherwise.
DEFAULT_LIMITS = SampleLimits()

#: What every parse checks, also with no limits given (a worker decoding a job): only
#: the nesting, which is what could exhaust the stack. Text a database refuses is made
#: storable where it is stored (``evalfleet.store``), so an old producer's job still runs.
_LENIENT = SampleLimits(max_depth=jsontext.HARD_MAX_DEPTH, max_keys=2**62,
                        max_key_chars=2**62, check_values=False)


class Sample(BaseModel):
    """One production interaction: the question, what was retrieved, what was answered."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, max_length=MAX_ID_LENGTH)
    """Unique per request; with the metric, prompt version and judge model it keys a verdict."""

    timestamp: datetime | None = None
    """When the interaction happened (timezone required); alert windows use it."""

    input: str = ""
    """The user's question or request."""

    output: str = ""
    """The application's answer."""

    context: list[str] = Field(default_factory=list)
    """Retrieved chunks, in the order the application used them."""

    reference: str | None = None
    """Expected answer, when one is known."""

    attributes: dict[str, str] = Field(default_factory=dict)
    """Segments that alerts and dashboards split by (app, route, model, prompt_version...)."""

    fields: dict[str, Any] = Field(default_factory=dict)
    """Metric-specific inputs, e.g. ``product_title`` or ``evaluation_goal``."""

    trajectory: Trajectory | None = None
    """An agent run's steps, offered tools and final answer (``evalfleet.core.trajectory``);
    None for a single call."""

    session: Session | None = None
    """A conversation's turns (``evalfleet.core.session``), for a metric of unit
    ``session``; None otherwise."""

    @field_validator("id")
    @classmethod
    def _id_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value

    @field_validator("timestamp")
    @classmethod
    def _timestamp_has_zone(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.utcoffset() is None:
            raise ValueError("must include a timezone, e.g. 2026-11-21T10:00:00Z")
        return value

    @field_validator("context", mode="before")
    @classmethod
    def _null_context_is_empty(cls, value: Any) -> Any:
        return [] if value is None else value

    def to_json(self) -> dict[str, Any]:
        """The sample as plain JSON data (the format it was read in); without a
        trajectory or a session, no such key (as before there were any)."""
        absent = {name for name in ("trajectory", "session") if getattr(self, name) is None}
        return self.model_dump(mode="json", exclude=absent or None)


def parse_sample(data: Any, *, record: str = "", limits: SampleLimits | None = None) -> Sample:
    """Validate decoded JSON as a sample.

    Args:
        data: The decoded JSON value (or plain Python data of the same shapes).
        record: Where it came from, for error messages (``"line 17"``).
        limits: Structural limits (nesting, keys, forbidden values), checked first;
            None checks the nesting only (see :data:`DEFAULT_LIMITS` for producers).

    Returns:
        The sample.

    Raises:
        InvalidSample: Naming the record, the id when readable, and the first bad field.
    """
    if not isinstance(data, dict):
        raise InvalidSample(f"expected a JSON object, got {_json_type(data)}", record=record)
    sample_id = data.get("id") if isinstance(data.get("id"), str) else None
    if sample_id is not None and _FORBIDDEN_CHAR.search(sample_id):
        sample_id = None
    problem = check_structure(data, limits=limits or _LENIENT)
    if problem is not None:
        field, reason = problem
        raise InvalidSample(reason, record=record, sample_id=sample_id, field=field)
    try:
        return Sample.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise InvalidSample(
            _describe_error(error), record=record, sample_id=sample_id,
            field=_field_path(error["loc"]),
        ) from None


def parse_sample_line(line: bytes, *, record: str = "",
                      limits: SampleLimits | None = None) -> Sample:
    """Decode one JSONL line (UTF-8) into a sample.

    Args:
        line: The raw line, with or without its newline.
        record: Where it came from, for error messages.
        limits: Structural limits, as for :func:`parse_sample`.

    Returns:
        The sample.

    Raises:
        InvalidSample: For bytes that are not UTF-8, text that is not JSON, or a bad record.
    """
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidSample(
            f"not valid UTF-8 (byte 0x{line[exc.start]:02x} at offset {exc.start})",
            record=record,
        ) from None
    try:
        # Past the limit the record is refused whole; up to the hard bound the walk in
        # check_structure names the field that nests too deep.
        data = jsontext.loads(text, parse_constant=_reject_constant)
    except jsontext.JsonTooDeep as exc:
        raise InvalidSample(f"nested deeper than {exc.depth} levels", record=record,
                            field=exc.key) from None
    except ValueError as exc:
        raise InvalidSample(f"not valid JSON: {exc}", record=record) from None
    return parse_sample(data, record=record, limits=limits)


def check_structure(data: Any, *, limits: SampleLimits) -> tuple[str | None, str] | None:
    """Find the first part of a record no store or parser should be handed. Linear time.

    Walks the record without recursion: every string and key (forbidden control
    characters, lone surrogates), every number (NaN, infinities), the nesting depth,
    and the number and length of keys of every object.

    Args:
        data: A decoded record (a dict), or any Python data a caller passed as one.
        limits: The limits.

    Returns:
        ``(field path, reason)`` for the first problem, or None.
    """
    if _looks_clean(data, limits=limits):
        return None
    return _first_problem(data, limits=limits)


def _looks_clean(data: Any, *, limits: SampleLimits) -> bool:
    """True when :func:`_first_problem` would find nothing; False when it may find
    something. The same checks without building a path per value, and the text
    checked once, joined: in the producers' profile the walk with paths was a third
    of screening a record."""
    texts: list[str] = []
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        kind = type(value)
        if kind is str:
            texts.append(value)
        elif kind is dict:
            if depth > limits.max_depth or len(value) > limits.max_keys:
                return False
            for key in value:
                if type(key) is not str or len(key) > limits.max_key_chars:
                    return False
            texts.extend(value)
            stack.extend([(item, depth + 1) for item in value.values()])
        elif kind is list:
            if depth > limits.max_depth:
                return False
            stack.extend([(item, depth + 1) for item in value])
        elif kind is int:
            if value.bit_length() > _MAX_INT_BITS and limits.check_values:
                return False
        elif kind is float:
            if not math.isfinite(value) and limits.check_values:
                return False
        elif value is not None and kind is not bool:
            return False  # another type, or a subclass: the full walk decides
    # A tab (allowed) between texts, so no check spans two of them.
    return not limits.check_values or _text_problem("\t".join(texts)) is None


def _first_problem(data: Any, *, limits: SampleLimits) -> tuple[str | None, str] | None:
    stack: list[tuple[str, Any, int]] = [("", data, 1)]
    while stack:
        path, value, depth = stack.pop()
        if limits.check_values:
            reason = _value_problem(value)
            if reason is not None:
                return path or None, reason
        if isinstance(value, dict | list):
            if depth > limits.max_depth:
                return path or None, f"nested deeper than {limits.max_depth} levels"
            if isinstance(value, list):
                stack.extend(reversed([(f"{path}[{n}]", item, depth + 1)
                                       for n, item in enumerate(value)]))
                continue
            problem = _object_problem(path, value, limits=limits)
            if problem is not None:
                return problem
            stack.extend(reversed([(_join(path, key), item, depth + 1)
                                   for key, item in value.items()]))
    return None


def _object_problem(path: str, value: dict[Any, Any], *,
                    limits: SampleLimits) -> tuple[str | None, str] | None:
    if len(value) > limits.max_keys:
        return path, f"{len(value):,} keys, over the limit of {limits.max_keys:,}"
    for key in value:
        if not isinstance(key, str):
            return path or None, f"has a key that is not a string ({_json_type(key)})"
        if len(key) > limits.max_key_chars:
            return path, (f"has a key of {len(key):,} characters, over the limit of "
                          f"{limits.max_key_chars:,} (starts {key[:32]!r})")
        reason = _text_problem(key) if limits.check_values else None
        if reason is not None:
            return path or None, f"has a key that {reason}"
    return None


def _value_problem(value: Any) -> str | None:
    if isinstance(value, str):
        return _text_problem(value)
    if value is not None and not isinstance(value, bool | int | float | list | dict):
        return f"is not a JSON value ({type(value).__name__})"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a finite number"
    if isinstance(value, int) and value.bit_length() > _MAX_INT_BITS:
        return f"a number of {value.bit_length():,} bits is out of range"
    return None


def _text_problem(text: str) -> str | None:
    # Deleting the forbidden bytes of ASCII text in C is several times faster than the
    # regular expression scan, which then runs only to name what it found.
    if text.isascii() and len(text.encode().translate(None, _FORBIDDEN_ASCII)) == len(text):
        return None
    found = _FORBIDDEN_CHAR.search(text)
    if found is None:
        return None
    char = found.group(0)
    kind = "an unpaired surrogate" if "\ud800" <= char <= "\udfff" else "a control character"
    return f"contains {kind} (U+{ord(char):04X} at offset {found.start()})"


def _join(path: str, key: str) -> str:
    # A key that would itself break the path is quoted.
    shown = key if key.isidentifier() or key.replace("-", "_").isidentifier() else repr(key)
    return f"{path}.{shown}" if path else shown


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed in a sample")


#: A step's type, which pydantic puts in the location of an error inside the step.
_STEP_TAGS = frozenset({"model", "tool", "retrieval", "handoff"})


def _field_path(loc: tuple[Any, ...]) -> str | None:
    path = ""
    for n, part in enumerate(loc):
        if part in _STEP_TAGS and n >= 3 and loc[n - 2] == "steps" and isinstance(loc[n - 1], int):
            continue
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or None


def _describe_error(error: Any) -> str:
    kind = error["type"]
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "is not a sample field (put extra keys under 'attributes' or 'fields')"
    received = error.get("input")
    message = str(error["msg"])
    if kind.endswith("_type") or kind in ("string_type", "list_type", "dict_type"):
        return f"{message[0].lower()}{message[1:]}, got {_json_type(received)}"
    return f"{message[0].lower()}{message[1:]}"


def _json_type(value: Any) -> str:
    names = {
        dict: "an object", list: "an array", str: "a string", bool: "a boolean",
        int: "a number", float: "a number", type(None): "null",
    }
    return names.get(type(value), type(value).__name__)
