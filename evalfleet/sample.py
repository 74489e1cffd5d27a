"""The sample record: one production interaction to be judged.

Parsing is pure: bytes in, a :class:`Sample` or an :class:`InvalidSample`
naming the record and the field out.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from evalfleet.errors import InvalidSample

#: Longest sample id accepted, in characters.
MAX_ID_LENGTH = 256


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
        """The sample as plain JSON data (the format it was read in)."""
        return self.model_dump(mode="json")


def parse_sample(data: Any, *, record: str = "") -> Sample:
    """Validate decoded JSON as a sample.

    Args:
        data: The decoded JSON value.
        record: Where it came from, for error messages (``"line 17"``).

    Returns:
        The sample.

    Raises:
        InvalidSample: Naming the record, the id when readable, and the first bad field.
    """
    if not isinstance(data, dict):
        raise InvalidSample(f"expected a JSON object, got {_json_type(data)}", record=record)
    sample_id = data.get("id") if isinstance(data.get("id"), str) else None
    try:
        return Sample.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise InvalidSample(
            _describe_error(error), record=record, sample_id=sample_id,
            field=_field_path(error["loc"]),
        ) from None


def parse_sample_line(line: bytes, *, record: str = "") -> Sample:
    """Decode one JSONL line (UTF-8) into a sample.

    Args:
        line: The raw line, with or without its newline.
        record: Where it came from, for error messages.

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
        data = json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        raise InvalidSample(f"not valid JSON: {exc}", record=record) from None
    return parse_sample(data, record=record)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed in a sample")


def _field_path(loc: tuple[Any, ...]) -> str | None:
    path = ""
    for part in loc:
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
