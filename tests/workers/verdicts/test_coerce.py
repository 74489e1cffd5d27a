"""Value coercion per field type, and a whole verdict's fields, scores and reason."""

from __future__ import annotations

import math
from typing import Any

import pytest

from evalfleet.core.metric import FieldSpec
from tests.workers.verdicts.builders import metric, sample
from workers.verdicts.coerce import (
    Invalid,
    coerce_value,
    coerce_verdict,
    describe,
    reference_missing,
    show,
    strict_fields,
)
from workers.verdicts.result import Verdict

UNIT = FieldSpec(type="number", minimum=0, maximum=1)
TEN = FieldSpec(type="number", minimum=0, maximum=10)
LIKERT = FieldSpec(type="integer", minimum=1, maximum=5)
FLAG = FieldSpec(type="boolean")
KIND = FieldSpec(type="enum", values=("none", "wrong_logic"))
IDENT = FieldSpec(type="id")
TEXT = FieldSpec(type="string")
OPTIONAL_TEXT = FieldSpec(type="string", required=False)
NULLABLE_TEXT = FieldSpec(type="string", nullable="allowed")
SIMILARITY = FieldSpec(type="number", minimum=0, maximum=1, nullable="when_reference_missing")


def coerce(value: Any, spec: FieldSpec, **sample_overrides: Any) -> Any:
    return coerce_value(value, spec, sample=sample(**sample_overrides))


@pytest.mark.parametrize(("value", "spec", "expected"), [
    (0.8, UNIT, 0.8), (0, UNIT, 0.0), (1, UNIT, 1.0), ("0.8", UNIT, 0.8), (" .5 ", UNIT, 0.5),
    ("80%", UNIT, 0.8), ("80 %", UNIT, 0.8), ("8/10", UNIT, 0.8), ("4 / 5", UNIT, 0.8),
    ("\uff10.\uff18", UNIT, 0.8), ("\uff18\uff10\uff05", UNIT, 0.8),
    ("\uff14\uff0f\uff15", UNIT, 0.8), ("8/10", TEN, 8.0), (7, TEN, 7.0),
    (4, LIKERT, 4), (4.0, LIKERT, 4), ("4", LIKERT, 4), ("4.0", LIKERT, 4), ("4/5", LIKERT, 4),
    (True, FLAG, True), ("false", FLAG, False), (" TRUE ", FLAG, True),
    ("none", KIND, "none"), (" Wrong_Logic ", KIND, "wrong_logic"),
    ("17", IDENT, "17"), (17, IDENT, "17"),
    ("text", TEXT, "text"), ("", TEXT, ""), (None, OPTIONAL_TEXT, None),
    (None, NULLABLE_TEXT, None),
])
def test_accepted(value: Any, spec: FieldSpec, expected: Any) -> None:
    coerced = coerce(value, spec)
    assert coerced == expected
    assert type(coerced) is type(expected)


@pytest.mark.parametrize(("value", "spec", "words"), [
    (1.3, UNIT, "1.3 is above the maximum 1.0"),
    (8, UNIT, "8 is above the maximum 1.0"),
    (-0.1, UNIT, "-0.1 is below the minimum 0.0"),
    ("130%", UNIT, '"130%" (1.3) is above the maximum 1.0'),
    ("80%", TEN, "a percentage is only accepted on a 0 to 1 scale"),
    ("8/0", UNIT, "no valid denominator"),
    ("0.8 (high)", UNIT, "is not a number"),
    ("0,8", UNIT, "is not a number"),
    (math.nan, UNIT, "NaN is not a finite number"),
    (math.inf, UNIT, "Infinity is not a finite number"),
    ("-Infinity", UNIT, "not a finite number"),
    ("nan", UNIT, "not a finite number"),
    (10**400, UNIT, "not a finite number"),
    (True, UNIT, "true is a boolean, not a number"),
    ([0.8], UNIT, "expected a number, got an array"),
    (None, UNIT, "null is not allowed"),
    (4.5, LIKERT, "4.5 is not a whole number"),
    ("4.5", LIKERT, "is not a whole number"),
    ("8/10", LIKERT, "a fraction must be out of the maximum 5"),
    ("80%", LIKERT, "a percentage is only accepted"),
    (6, LIKERT, "6 is above the maximum 5"),
    (0, LIKERT, "0 is below the minimum 1"),
    (False, LIKERT, "boolean, not a number"),
    (1, FLAG, "expected true or false, got a number 1"),
    ("yes", FLAG, 'expected true or false, got a string "yes"'),
    ("maybe", KIND, '"maybe" is not one of none, wrong_logic'),
    (3, KIND, "3 is not one of"),
    ("18", IDENT, '"18" does not match the sample id "17"'),
    (17.0, IDENT, "does not match"),
    (True, IDENT, "does not match"),
    (5, TEXT, "expected a string, got a number 5"),
    (None, TEXT, "null is not allowed"),
    ("\u00b9/\u2082", UNIT, "is not a number"),  # superscript one over subscript two
    ("\u2462", LIKERT, "is not a number"),  # circled three
    ("\u0663", LIKERT, "is not a number"),  # Arabic-Indic three
    ("5/1e999", UNIT, "not a finite number"),
    ("1e999/2", UNIT, "not a finite number"),
    ("1e999%", UNIT, "not a finite number"),
])
def test_rejected(value: Any, spec: FieldSpec, words: str) -> None:
    coerced = coerce(value, spec)
    assert isinstance(coerced, Invalid)
    assert words in coerced.reason


@pytest.mark.parametrize(("reference", "missing"), [
    (None, True), ("", True), ("   ", True), ("none", True), (" NONE ", True), ("None.", False),
    ("Canberra", False),
])
def test_reference_missing(reference: str | None, missing: bool) -> None:
    assert reference_missing(sample(reference=reference)) is missing


def test_null_similarity_follows_the_reference() -> None:
    assert coerce(None, SIMILARITY, reference=None) is None
    assert coerce(0.4, SIMILARITY, reference="Canberra") == 0.4
    given_null = coerce(None, SIMILARITY, reference="Canberra")
    assert isinstance(given_null, Invalid) and "has a reference" in given_null.reason
    given_number = coerce(0.0, SIMILARITY, reference="none")
    assert isinstance(given_number, Invalid) and "must be null" in given_number.reason


def test_declared_failure_scores_need_only_be_null_or_finite() -> None:
    relaxed = coerce_value(1.5, UNIT, sample=sample(), declared_failure=True)
    assert relaxed == 1.5
    assert coerce_value(None, UNIT, sample=sample(), declared_failure=True) is None
    assert isinstance(coerce_value(math.nan, UNIT, sample=sample(), declared_failure=True), Invalid)
    assert isinstance(coerce_value("high", UNIT, sample=sample(), declared_failure=True), Invalid)


def test_verdict_scores_are_normalised_and_raw_kept() -> None:
    data = {"id": 17, "is_correct": False, "extracted_answer": None, "reasoning_score": 2.0,
            "error_type": "wrong_logic", "surplus": "ignored"}
    verdict = coerce_verdict(data, metric=metric("bbh_match"), sample=sample())
    assert isinstance(verdict, Verdict)
    assert verdict.scores == {"correct": 0.0, "reasoning": 0.25}
    assert verdict.raw_scores == {"correct": False, "reasoning": 2}
    assert verdict.fields["comment"] is None
    assert "surplus" not in verdict.fields
    assert verdict.reason is None


def test_verdict_lists_every_problem_with_a_score() -> None:
    errors = coerce_verdict(
        {"id": "18", "is_correct": 1, "reasoning_score": 9, "error_type": "none"},
        metric=metric("bbh_match"), sample=sample(),
    )
    assert errors == [
        "field 'id': \"18\" does not match the sample id \"17\"",
        "field 'is_correct': expected true or false, got a number 1",
        "field 'reasoning_score': 9 is above the maximum 5",
    ]


def test_annotations_are_kept_as_written_and_noted() -> None:
    verdict = coerce_verdict(
        {"id": "17", "is_correct": True, "reasoning_score": 4, "error_type": "Typo",
         "comment": ["a", "list"]},
        metric=metric("bbh_match"), sample=sample(),
    )
    assert isinstance(verdict, Verdict)
    assert verdict.scores == {"correct": 1.0, "reasoning": 0.75}
    assert verdict.fields["error_type"] == "Typo"
    assert verdict.fields["comment"] == '["a", "list"]'
    assert verdict.fields["extracted_answer"] is None
    assert verdict.notes == (
        "field 'extracted_answer' is missing",
        "field 'error_type': \"Typo\" is not one of none, format_error, hallucination, "
        "wrong_logic, no_answer",
        "field 'comment': expected a string, got an array",
    )


def test_strict_fields_are_scores_id_and_status() -> None:
    assert strict_fields(metric("bbh_match")) == {"id", "is_correct", "reasoning_score"}
    assert strict_fields(metric("rag_qa")) == {
        "faithfulness", "context_relevance", "answer_relevance", "semantic_similarity",
        "evaluation_status",
    }


@pytest.mark.parametrize("marker", ["N/A", "n/a", "none", " None ", "null", "NULL", "", "  "])
def test_null_markers_are_null_where_a_score_may_be_null(marker: str) -> None:
    assert coerce(marker, SIMILARITY, reference=None) is None
    refused = coerce(marker, SIMILARITY, reference="Canberra")
    assert isinstance(refused, Invalid) and "means null" in refused.reason
    assert isinstance(coerce(marker, UNIT), Invalid)
    assert coerce(marker, NULLABLE_TEXT) == marker  # text fields keep the words


def test_declared_failure_needs_a_valid_status() -> None:
    errors = coerce_verdict(
        {"evaluation_status": "broken", "reason": "x"}, metric=metric("rag_qa"), sample=sample(),
    )
    assert isinstance(errors, list)
    assert "field 'evaluation_status': \"broken\" is not one of success, failed" in errors


def test_declared_failure_keeps_scores_null_whatever_the_fields_say() -> None:
    verdict = coerce_verdict(
        {"evaluation_status": "failed", "faithfulness": 0.7, "error": "Timeout"},
        metric=metric("rag_qa"), sample=sample(),
    )
    assert isinstance(verdict, Verdict)
    assert verdict.judge_failure
    assert set(verdict.scores.values()) == {None}
    assert verdict.fields["faithfulness"] == 0.7
    assert verdict.reason == "error: Timeout"


@pytest.mark.parametrize(("value", "shown"), [
    (1.3, "1.3"), (6, "6"), (True, "true"), (None, "null"), ("x", '"x"'), (math.nan, "NaN"),
    (-math.inf, "-Infinity"), ({"a": 1}, "an object"), ([1], "an array"),
    ("y" * 50, '"' + "y" * 40 + '..."'),
])
def test_show(value: Any, shown: str) -> None:
    assert show(value) == shown


def test_describe() -> None:
    assert describe("x") == 'a string "x"'
    assert describe(False) == "a boolean false"
    assert describe(2.5) == "a number 2.5"
    assert describe(None) == "null"
