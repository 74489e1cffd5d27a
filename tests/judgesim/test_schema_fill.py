"""Verdicts filled from a request's JSON schema."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest

from evalfleet.judgesim import simulated_scores
from evalfleet.judgesim.schema_fill import fill_verdict
from tests.judgesim.builders import reply, user

SCHEMAS: list[tuple[dict[str, Any], set[str]]] = [
    ({"type": "object", "properties": {
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "grade": {"type": "integer", "minimum": 1, "maximum": 5},
        "passed": {"type": "boolean"},
        "label": {"type": "string", "enum": ["good", "bad"]},
        "maybe": {"type": ["number", "null"], "minimum": 10, "maximum": 20},
        "note": {"type": "string", "maxLength": 5},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
        "nested": {"type": "object", "properties": {"x": {"type": "integer", "minimum": -3,
                                                          "maximum": -1}}},
     }}, {"score", "grade", "passed", "maybe"}),
    ({"type": "object", "properties": {
        "a": {"$ref": "#/$defs/unit"}, "b": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/unit"}]},
        "c": {"const": "fixed"}, "d": {"type": "number", "exclusiveMinimum": 0,
                                       "exclusiveMaximum": 0.01},
        "e": {"type": "array", "items": {"type": "integer"}, "maxItems": 0},
     }, "$defs": {"unit": {"type": "number", "minimum": 0, "maximum": 1}}}, {"a", "b", "d"}),
]


def satisfies(value: Any, schema: dict[str, Any], root: dict[str, Any]) -> bool:
    """A small checker for the schema features the simulator supports."""
    if "$ref" in schema:
        return satisfies(value, root["$defs"][schema["$ref"].rsplit("/", 1)[1]], root)
    if "const" in schema:
        return bool(value == schema["const"])
    if "anyOf" in schema:
        return any(satisfies(value, option, root) for option in schema["anyOf"])
    if "enum" in schema and value not in schema["enum"]:
        return False
    kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    if value is None:
        return "null" in kinds
    if isinstance(value, bool):
        return "boolean" in kinds
    if isinstance(value, int | float):
        in_range = (schema.get("minimum", -1e9) <= value <= schema.get("maximum", 1e9)
                    and schema.get("exclusiveMinimum", -1e9) < value
                    < schema.get("exclusiveMaximum", 1e9))
        return in_range and ("number" in kinds or ("integer" in kinds and isinstance(value, int)))
    if isinstance(value, str):
        return "string" in kinds and len(value) <= schema.get("maxLength", 1e9)
    if isinstance(value, list):
        return ("array" in kinds and len(value) >= schema.get("minItems", 0)
                and all(satisfies(item, schema["items"], root) for item in value))
    return "object" in kinds and set(value) == set(schema["properties"]) and all(
        satisfies(value[key], spec, root) for key, spec in schema["properties"].items())


@pytest.mark.parametrize(("schema", "score_keys"), SCHEMAS)
def test_json_schema_verdict_satisfies_the_schema(schema: dict[str, Any],
                                                  score_keys: set[str]) -> None:
    response_format = {"type": "json_schema", "json_schema": {"name": "v", "schema": schema}}
    for n in range(10):
        messages = user(f"Judge answer {n}.")
        content, _ = reply(messages, response_format=response_format)
        verdict = json.loads(content)
        assert satisfies(verdict, schema, schema), verdict
        scores = simulated_scores(messages, response_format=response_format)
        assert set(scores) == score_keys
        assert {key: verdict[key] for key in score_keys} == scores


def counting() -> Iterator[int]:
    return itertools.count()


def test_the_same_slots_fill_the_same_verdict() -> None:
    schema = SCHEMAS[0][0]
    first = fill_verdict(schema, iter([7, 40_000, 3, 9, 65_535] * 20))
    assert first == fill_verdict(schema, iter([7, 40_000, 3, 9, 65_535] * 20))
    assert first != fill_verdict(schema, iter([8, 1, 30_000, 2, 12_345] * 20))


def test_slots_are_read_in_property_order() -> None:
    integer = {"type": "integer", "minimum": 0, "maximum": 100}
    schema = {"type": "object", "properties": {"a": integer, "b": integer, "c": integer}}
    assert fill_verdict(schema, iter([5, 7, 9])) == ({"a": 5, "b": 7, "c": 9}, ("a", "b", "c"))


def test_enum_value_is_chosen_by_slot_and_is_not_a_score() -> None:
    schema = {"type": "object", "properties": {"label": {"type": "integer", "enum": [1, 2, 3]}}}
    assert fill_verdict(schema, iter([4])) == ({"label": 2}, ())


@pytest.mark.parametrize("slot", [0, 0xFFFF])
def test_numbers_never_sit_on_an_exclusive_bound(slot: int) -> None:
    schema = {"type": "object", "properties": {
        "x": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}}}
    assert fill_verdict(schema, iter([slot])) == ({"x": 0.5}, ("x",))


@pytest.mark.parametrize(("schema", "verdict"), [
    ({"type": "string"}, {"value": "Simulated verdict."}),
    ({"type": "array", "items": {"type": "boolean"}, "minItems": 3},
     {"value": [False, True, False]}),
    ({"$ref": "#/$defs/missing"}, {"value": None}),
    ({"$ref": "#"}, {"value": None}),
])
def test_a_non_object_verdict_is_wrapped(schema: dict[str, Any],
                                         verdict: dict[str, Any]) -> None:
    assert fill_verdict(schema, counting()) == (verdict, ())


def test_strings_respect_min_and_max_length() -> None:
    schema = {"type": "object", "properties": {
        "short": {"type": "string", "maxLength": 4},
        "padded": {"type": "string", "minLength": 30},
        "huge": {"type": "string", "minLength": 10**9},
    }}
    verdict, keys = fill_verdict(schema, counting())
    assert verdict["short"] == "Simu" and keys == ()
    assert verdict["padded"] == "Simulated padded.".ljust(30, ".")
    assert len(verdict["huge"]) == 1000


def test_deep_nesting_stops_with_null() -> None:
    node = {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}
    schema = {"$ref": "#/$defs/node", "$defs": {"node": node}}
    verdict, _ = fill_verdict(schema, counting())
    depth = 0
    while isinstance(verdict, dict):
        verdict, depth = verdict["next"], depth + 1
    assert verdict is None and depth == 9
