"""A verdict that satisfies a request's JSON schema, filled from a stream of numbers.

The simulated judge answers a ``json_schema`` response format it does not
recognise with a value built from the schema: ``const`` and ``enum`` values,
numbers and integers inside their bounds, booleans, strings of a fitting
length, arrays and objects, following ``$ref``, ``anyOf``, ``oneOf`` and
``allOf``. Every number, boolean and enum choice reads the next 16-bit value
(0..0xFFFF) of ``slots``, so the same stream fills the same verdict.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

#: Longest string a schema's ``minLength`` can ask of a generated verdict, in characters.
_MAX_STRING_CHARS = 1000


def fill_verdict(
    schema: dict[str, Any], slots: Iterator[int],
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """A verdict for ``schema``, and which of its keys are scores.

    Args:
        schema: The request's JSON schema (its ``$ref`` paths resolve against it).
        slots: 16-bit values, consumed in order as the verdict is filled.

    Returns:
        The verdict (a non-object value is wrapped as ``{"value": ...}``), and the
        top-level properties that hold a number, integer or boolean and no ``enum``.
    """
    filler = _SchemaFiller(slots, schema)
    value = filler.fill(schema, "verdict", 0)
    verdict = value if isinstance(value, dict) else {"value": value}
    properties = schema.get("properties")
    keys = tuple(name for name, spec in (properties or {}).items()
                 if isinstance(spec, dict) and "enum" not in spec
                 and filler.main_type(spec) in ("number", "integer", "boolean"))
    return verdict, keys


class _SchemaFiller:
    """Fills a JSON schema with values read from successive slots."""

    def __init__(self, slots: Iterator[int], root: dict[str, Any]) -> None:
        self.slots = slots
        self.root = root

    def next_slot(self) -> int:
        return next(self.slots)

    def fill(self, schema: Any, name: str, depth: int) -> Any:
        schema = self.resolve(schema)
        if depth > 8 or not isinstance(schema, dict):
            return None
        if "const" in schema:
            return schema["const"]
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return schema["enum"][self.next_slot() % len(schema["enum"])]
        for combinator in ("anyOf", "oneOf", "allOf"):
            options = schema.get(combinator)
            if isinstance(options, list) and options:
                chosen = next((o for o in options if self.main_type(o) != "null"), options[0])
                return self.fill(chosen, name, depth + 1)
        return self.fill_type(schema, self.main_type(schema), name, depth)

    def fill_type(self, schema: dict[str, Any], kind: str, name: str, depth: int) -> Any:
        if kind == "object":
            return {key: self.fill(spec, key, depth + 1)
                    for key, spec in (schema.get("properties") or {}).items()}
        if kind == "array":
            most = _bound(schema, "maxItems")
            count = int(min(max(1, _bound(schema, "minItems") or 1), 5 if most is None else most))
            return [self.fill(schema.get("items", {}), name, depth + 1) for _ in range(count)]
        if kind == "number":
            return self.number(schema)
        if kind == "integer":
            return self.integer(schema)
        if kind == "boolean":
            return self.next_slot() % 2 == 1
        if kind == "null":
            return None
        min_length = min(int(_bound(schema, "minLength") or 0), _MAX_STRING_CHARS)
        text = f"Simulated {name}.".ljust(min_length, ".")
        max_length = _bound(schema, "maxLength")
        return text if max_length is None else text[: int(max_length)]

    def number(self, schema: dict[str, Any]) -> float:
        low = _bound(schema, "minimum", "exclusiveMinimum")
        high = _bound(schema, "maximum", "exclusiveMaximum")
        if low is None:
            low = 0.0 if high is None else high - 1
        if high is None:
            high = low + 1
        value = min(max(round(low + self.next_slot() / 0xFFFF * (high - low), 2), low), high)
        if value in (_bound(schema, "exclusiveMinimum"), _bound(schema, "exclusiveMaximum")):
            value = (low + high) / 2
        return float(value)

    def integer(self, schema: dict[str, Any]) -> int:
        minimum, above = _bound(schema, "minimum"), _bound(schema, "exclusiveMinimum")
        maximum, below = _bound(schema, "maximum"), _bound(schema, "exclusiveMaximum")
        low = math.ceil(minimum) if minimum is not None else (
            math.floor(above) + 1 if above is not None else 0)
        high = math.floor(maximum) if maximum is not None else (
            math.ceil(below) - 1 if below is not None else low + 10)
        return low + self.next_slot() % max(1, high - low + 1)

    def main_type(self, schema: Any, depth: int = 0) -> str:
        schema = self.resolve(schema)
        if depth > 8 or not isinstance(schema, dict):
            return "null"
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if isinstance(kind, str):
            return kind
        for combinator in ("anyOf", "oneOf", "allOf"):
            options = schema.get(combinator)
            if isinstance(options, list) and options:
                kinds = [self.main_type(option, depth + 1) for option in options]
                return next((k for k in kinds if k != "null"), "null")
        return "object" if "properties" in schema else "array" if "items" in schema else "string"

    def resolve(self, schema: Any) -> Any:
        for _ in range(8):
            if not isinstance(schema, dict) or not isinstance(schema.get("$ref"), str):
                return schema
            node: Any = self.root
            for part in schema["$ref"].removeprefix("#/").split("/"):
                node = node.get(part) if isinstance(node, dict) and part else node
            schema = node
        return None


def _bound(schema: dict[str, Any], *keys: str) -> float | None:
    """The first of ``keys`` that holds a finite number in ``schema``."""
    for key in keys:
        value = schema.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            return value
    return None
