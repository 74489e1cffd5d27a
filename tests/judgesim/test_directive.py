"""Verdict overrides written into a prompt as [[judge-sim key=value]]."""

from __future__ import annotations

from typing import Any

import pytest

from evalfleet.judgesim import parse_directives


@pytest.mark.parametrize(("text", "expected"), [
    ("no directive", {}),
    ("[[judge-sim faithfulness=0.2 answer_relevance=0.9]]",
     {"faithfulness": 0.2, "answer_relevance": 0.9}),
    ("a [[judge-sim is_correct=false reasoning_score=2]] b",
     {"is_correct": False, "reasoning_score": 2}),
    ('[[judge-sim semantic_similarity=null comment="two words"]]',
     {"semantic_similarity": None, "comment": "two words"}),
    ("[[judge-sim error_type=hallucination]]", {"error_type": "hallucination"}),
    ("[[judge-sim score=2]] then [[judge-sim score=4]]", {"score": 4}),
    ("[[judge-sim\nfaithfulness=1]]", {"faithfulness": 1}),
    ("[judge-sim faithfulness=1]", {}),
])
def test_parses_directives(text: str, expected: dict[str, Any]) -> None:
    assert parse_directives(text) == expected


@pytest.mark.parametrize(("value", "expected"), [
    ("0.25", 0.25), ("1e3", 1000.0), ("-2", -2), ("true", True), ("null", None),
    ('"a \\"quoted\\" word"', 'a "quoted" word'), ("word", "word"), ("[1,2]", "[1,2]"),
])
def test_values_are_json_scalars_or_bare_strings(value: str, expected: Any) -> None:
    assert parse_directives(f"[[judge-sim key={value} ]]") == {"key": expected}
