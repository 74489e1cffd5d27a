"""response_format_for: the metric's wish, lowered to what the judge supports."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.workers.verdicts.builders import bbh, cp, metric, rag, sample
from workers.verdicts import Verdict, parse_verdict, response_format_for, verdict_schema


@pytest.mark.parametrize(("name", "supported", "kind"), [
    ("context_precision", "json_schema", "json_schema"),
    ("context_precision", "json_object", "json_object"),
    ("context_precision", "text", None),
    ("bbh_match", "json_schema", "json_schema"),
    ("rag_qa", "json_object", "json_object"),
    ("rec_faithfulness", "json_schema", None),
    ("rec_faithfulness", "text", None),
])
def test_lowered_to_what_the_judge_supports(name: str, supported: Any, kind: str | None) -> None:
    response_format = response_format_for(metric(name), supported=supported)
    if kind is None:
        assert response_format is None
    else:
        assert response_format is not None and response_format["type"] == kind


def test_json_object_mode_is_just_the_type() -> None:
    assert response_format_for(metric("bbh_match"), supported="json_object") == {
        "type": "json_object",
    }


def test_json_schema_is_strict_and_named_after_the_metric() -> None:
    response_format = response_format_for(metric("context_precision"), supported="json_schema")
    assert response_format == {
        "type": "json_schema",
        "json_schema": {
            "name": "context_precision",
            "strict": True,
            "schema": {
                "type": "object",
                "properties": {
                    "context_precision_score": {"type": "number", "minimum": 0, "maximum": 1},
                    "reason": {"type": "string"},
                },
                "required": ["context_precision_score", "reason"],
                "additionalProperties": False,
            },
        },
    }


def test_bbh_schema_types_enums_and_nullables() -> None:
    properties = verdict_schema(metric("bbh_match"))["properties"]
    assert properties == {
        "id": {"type": "string"},
        "is_correct": {"type": "boolean"},
        "extracted_answer": {"type": ["string", "null"]},
        "reasoning_score": {"type": "integer", "minimum": 1, "maximum": 5},
        "error_type": {
            "type": "string",
            "enum": ["none", "format_error", "hallucination", "wrong_logic", "no_answer"],
        },
        "comment": {"type": ["string", "null"]},
    }


def test_rag_schema_lets_a_declared_failure_send_null_scores() -> None:
    schema = verdict_schema(metric("rag_qa"))
    assert schema["required"] == list(metric("rag_qa").spec.output.fields)
    assert schema["additionalProperties"] is False
    for name in ("faithfulness", "context_relevance", "answer_relevance", "semantic_similarity"):
        assert schema["properties"][name] == {
            "type": ["number", "null"], "minimum": 0, "maximum": 1,
        }
    assert schema["properties"]["evaluation_status"] == {
        "type": "string", "enum": ["success", "failed"],
    }


@pytest.mark.parametrize(("name", "reply"), [
    ("context_precision", cp()), ("bbh_match", bbh()), ("rag_qa", rag()),
])
def test_a_reply_in_the_schema_parses(name: str, reply: str) -> None:
    # Every key the schema requires is a key the parser accepts, with no repair.
    data = json.loads(reply)
    assert set(data) == set(verdict_schema(metric(name))["properties"])
    assert isinstance(parse_verdict(reply, metric=metric(name), sample=sample()), Verdict)


def test_schema_is_plain_json() -> None:
    for name in ("context_precision", "bbh_match", "rag_qa"):
        schema = verdict_schema(metric(name))
        assert json.loads(json.dumps(schema)) == schema
