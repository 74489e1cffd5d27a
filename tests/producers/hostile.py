"""Hostile sample records, as JSONL text and as Python data, with the field each names."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tests.producers.builders import record


@dataclass(frozen=True)
class Hostile:
    """One record a producer must reject, naming ``field``."""

    name: str
    text: str
    """The record as one JSON line (no newline)."""
    value: Any
    """The same record as Python data (what an SDK caller passes)."""
    field: str | None
    """The field the rejection names (a prefix of it), None for the record as a whole."""


def _deep(levels: int) -> tuple[str, Any]:
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return "[" * levels + "]" * levels, value


def _from(name: str, data: dict[str, Any], field: str | None) -> Hostile:
    return Hostile(name, json.dumps(data), data, field)


def hostile_records(n: int) -> list[Hostile]:
    """The table; record ids start at ``hostile-{n}``."""
    deep_text, deep_value = _deep(5_000)
    mid_text, mid_value = _deep(40)
    rid = f"hostile-{n}"
    return [
        _from("nul in input", record(0, id=f"{rid}-a", input="a\x00b"), "input"),
        _from("bell in output", record(0, id=f"{rid}-b", output="x\x07"), "output"),
        _from("nul in attribute", record(0, id=f"{rid}-c", attributes={"app": "\x00"}),
              "attributes.app"),
        _from("surrogate in context", record(0, id=f"{rid}-d", context=["ok", "\ud800x"]),
              "context[1]"),
        _from("surrogate in id", record(0, id="bad\udfff"), "id"),
        Hostile("infinite number", json.dumps(record(0, id=f"{rid}-f"))[:-1]
                + ', "fields": {"base_price": 1e999}}',
                record(0, id=f"{rid}-f", fields={"base_price": float("inf")}),
                "fields.base_price"),
        Hostile("nested 5,000 deep", json.dumps(record(0, id=f"{rid}-g"))[:-1]
                + f', "fields": {{"x": {deep_text}}}}}',
                record(0, id=f"{rid}-g", fields={"x": deep_value}), "fields"),
        Hostile("nested 40 deep", json.dumps(record(0, id=f"{rid}-h"))[:-1]
                + f', "fields": {{"x": {mid_text}}}}}',
                record(0, id=f"{rid}-h", fields={"x": mid_value}), "fields.x"),
        _from("long attribute key", record(0, id=f"{rid}-i", attributes={"k" * 300_000: "v"}),
              "attributes"),
        _from("long fields key", record(0, id=f"{rid}-j", fields={"k" * 300_000: "v"}),
              "fields"),
        _from("many attribute keys",
              record(0, id=f"{rid}-k", attributes={f"a{i}": "v" for i in range(100_000)}),
              "attributes"),
        _from("nul in a fields key", record(0, id=f"{rid}-l", fields={"a\x00": "v"}), "fields"),
        _from("huge integer", record(0, id=f"{rid}-m", fields={"n": 10 ** 40}), "fields.n"),
        _from("100,000 trajectory steps",
              record(0, id=f"{rid}-n", trajectory={
                  "steps": [{"type": "handoff", "agent": "a"}] * 100_000}),
              "trajectory.steps"),
        Hostile("tool arguments nested 10,000 deep",
                json.dumps(record(0, id=f"{rid}-o"))[:-1]
                + ', "trajectory": {"steps": [{"type": "tool", "name": "t", "arguments": '
                + _deep(10_000)[0] + "}]}}",
                record(0, id=f"{rid}-o", trajectory={"steps": [
                    {"type": "tool", "name": "t", "arguments": _deep(10_000)[1]}]}),
                "trajectory"),
        _from("a 1 MB tool result",
              record(0, id=f"{rid}-p", trajectory={"steps": [
                  {"type": "tool", "name": "t", "result": "r" * 1_048_576}]}),
              "trajectory.steps[0].result"),
        _from("a step of no known type",
              record(0, id=f"{rid}-q", trajectory={"steps": [{"type": "dance"}]}),
              "trajectory.steps[0]"),
    ]
