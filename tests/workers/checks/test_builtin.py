"""The built-in checks, table-tested at their edges and against hostile text."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import TypeAdapter

from evalfleet.core.checkspec import CheckSpec, LoadedCheck, check_version
from evalfleet.core.sample import Sample
from workers.checks import CheckResult, CheckRunner
from workers.checks import builtin as checks
from workers.checks.builtin import MAX_SCHEMA_INSTANCE_CHARS, last_number, normalise
from workers.checks.result import MISSING_INPUT, SCHEMA_RECURSION, TOO_LARGE

SPEC: TypeAdapter[Any] = TypeAdapter(CheckSpec)

#: Ten million characters of output.
TEN_MB = 10_000_000


def run(spec: dict[str, Any], text: str, reference: str | None = None) -> CheckResult:
    parsed = SPEC.validate_python(spec)
    return checks.prepare(parsed, schema=getattr(parsed, "schema_", None))(text, reference)


def passes(spec: dict[str, Any], text: str, reference: str | None = None) -> bool | float | None:
    result = run(spec, text, reference)
    assert result.error_class is None, result
    return result.score


@pytest.mark.parametrize(("text", "expected"), [
    ('{"a": 1}', True), ("[]", True), ("0", True), ('"x"', True), ("null", True),
    ("", False), ("{", False), ('{"a": 1} trailing', False), ("{'a': 1}", False),
    ("NaN", False), ('{"a": 1,}', False), ("[" * 1025 + "]" * 1025, False),
    ('"\ud800"', False),
])
def test_json_valid(text: str, expected: bool) -> None:
    assert passes({"check": "json_valid"}, text) is expected


SCHEMA = {"type": "object", "required": ["answer"],
          "properties": {"answer": {"type": "string"}, "n": {"type": "integer", "maximum": 3}}}


@pytest.mark.parametrize(("text", "expected", "reason"), [
    ('{"answer": "yes"}', True, "valid against the schema"),
    ('{"answer": "yes", "n": 3}', True, "valid"),
    ('{"answer": "yes", "n": 4}', False, r"at \$.n: 4 is greater than the maximum of 3"),
    ('{"n": 1}', False, r"'answer' is a required property"),
    ('["answer"]', False, "is not of type 'object'"),
    ("answer: yes", False, "not valid JSON"),
])
def test_json_schema(text: str, expected: bool, reason: str) -> None:
    result = run({"check": "json_schema", "schema": SCHEMA}, text)
    assert result.score is expected and re.search(reason, result.reason), result


def test_a_recursive_ref_is_a_named_failure() -> None:
    for schema in ({"$ref": "#"},
                   {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                    "$ref": "#/$defs/a"}):
        result = run({"check": "json_schema", "schema": schema}, '{"a": 1}')
        assert result.error_class == SCHEMA_RECURSION and result.score is None


def test_a_recursive_schema_that_moves_into_the_document_validates() -> None:
    tree = {"type": "object", "properties": {"children": {"type": "array",
                                                          "items": {"$ref": "#"}}}}
    assert passes({"check": "json_schema", "schema": tree},
                  '{"children": [{"children": []}, {"children": [{}]}]}') is True
    assert passes({"check": "json_schema", "schema": tree}, '{"children": [1]}') is False


def test_a_remote_ref_is_never_fetched() -> None:
    # The loader refuses it; a schema built past the loader still fetches nothing.
    result = run({"check": "json_schema", "schema": {"type": "object"}}, "{}")
    assert result.score is True
    validator = checks.SchemaValidator({"$ref": "http://127.0.0.1:9/never.json"})
    result = validator.check({})
    assert result.error_class == "schema_ref" and "never.json" in result.reason


@pytest.mark.parametrize(("check", "pattern", "text", "expected"), [
    ("matches", r"\bthanks\b", "many thanks!", True),
    ("matches", r"\bthanks\b", "thanksgiving", False),
    ("matches", r"^\d{3}$", "123", True),
    ("matches", r"^\d{3}$", "1234", False),
    ("never_matches", r"sk-[A-Za-z0-9]{20,}", "key sk-" + "a" * 20, False),
    ("never_matches", r"sk-[A-Za-z0-9]{20,}", "key sk-" + "a" * 19, True),
    ("never_matches", r"(?i)as an ai", "As an AI, I cannot", False),
    ("matches", "", "", True),
])
def test_patterns(check: str, pattern: str, text: str, expected: bool) -> None:
    assert passes({"check": check, "pattern": pattern}, text) is expected


def test_a_pattern_match_names_the_offset_never_the_text() -> None:
    result = run({"check": "never_matches", "pattern": "sk-[a-z]+"}, "key: sk-secret")
    assert "offset 5" in result.reason and "secret" not in result.reason


def test_catastrophic_backtracking_patterns_run_in_linear_time() -> None:
    # Under Python's re each of these takes exponential time on this text.
    text = "a" * 50_000 + "!"
    for pattern in (r"(a+)+$", r"(a|aa)+$", r"(\w+\s?)+$"):
        assert passes({"check": "matches", "pattern": pattern}, text) is False


@pytest.mark.parametrize(("steps", "text", "reference", "expected"), [
    ((), "Paris", "Paris", True),
    ((), "Paris", "paris", False),
    ((), "Paris ", "Paris", False),
    (("case",), "PARIS", "paris", True),
    (("whitespace",), "  New \n York\t", "New York", True),
    (("punctuation",), "Paris.", "Paris", True),
    (("punctuation",), "«Paris»!", "Paris", True),
    (("numbers",), "1,000.0", "1000", True),
    (("numbers",), "0.50", ".5", True),
    (("numbers",), "1e3", "1000", True),
    (("numbers",), "1000", "1001", False),
    (("case", "whitespace", "punctuation", "numbers"), " The answer: 1,000. ", "the answer 1000",
     True),
    (("case",), "Straße", "STRASSE", True),
])
def test_equals(steps: tuple[str, ...], text: str, reference: str, expected: bool) -> None:
    spec = {"check": "equals", "normalise": list(steps)}
    assert passes(spec, text, reference) is expected


def test_equals_a_literal_value() -> None:
    assert passes({"check": "equals", "value": "OK", "normalise": ["case"]}, "ok") is True


@pytest.mark.parametrize(("check", "values", "text", "expected", "reason"), [
    ("contains_all", ["refund", "14 days"], "A refund within 14 days.", True, "contains all of 2"),
    ("contains_all", ["refund", "14 days"], "A refund soon.", False, "lacks '14 days' of 2"),
    ("contains_any", ["sorry", "apologise"], "We apologise.", True, "contains 'apologise'"),
    ("contains_any", ["sorry", "apologise"], "Done.", False, "contains none of 2"),
])
def test_contains(check: str, values: list[str], text: str, expected: bool, reason: str) -> None:
    result = run({"check": check, "values": values}, text)
    assert result.score is expected and result.reason.startswith(reason), result


def test_contains_normalises_both_sides() -> None:
    assert passes({"check": "contains_any", "values": ["FOURTEEN Days"],
                   "normalise": ["case", "whitespace"]}, "within fourteen\n days") is True


@pytest.mark.parametrize(("spec", "text", "reference", "expected"), [
    ({}, "42", "42", True),
    ({}, "The answer is 42.", "42", True),
    ({}, "41.9", "42", False),
    ({"tolerance": 0.1}, "41.9", "42", True),
    ({"tolerance": 0.1}, "41.8", "42", False),
    ({"relative": 0.01}, "1,010", "1000", True),
    ({"relative": 0.01}, "1,011", "1000", False),
    ({}, "-3", "-3.0", True),
    ({}, "no number here", "42", False),
    ({}, "42", "unknown", False),
    ({}, "inf", "inf", False),
    ({"value": "3.14", "tolerance": 0.01}, "pi is 3.141", None, True),
])
def test_numeric(spec: dict[str, Any], text: str, reference: str | None, expected: bool) -> None:
    assert passes({"check": "numeric", **spec}, text, reference) is expected


@pytest.mark.parametrize(("text", "expected"), [
    ("1,000.5", 1000.5), ("from 3 to 7", 7.0), ("none", None), ("-0", 0.0), ("x1e400", None),
])
def test_last_number(text: str, expected: float | None) -> None:
    assert last_number(text) == expected


@pytest.mark.parametrize(("spec", "text", "expected"), [
    ({"max": 5}, "12345", True), ({"max": 5}, "123456", False),
    ({"min": 1}, "", False), ({"min": 0, "max": 0}, "", True),
    ({"count": "tokens", "max": 2}, "12345678", True),
    ({"count": "tokens", "max": 2}, "123456789", False),
    ({"count": "tokens", "min": 1}, "a", True),
])
def test_length(spec: dict[str, Any], text: str, expected: bool) -> None:
    assert passes({"check": "length", **spec}, text) is expected


def test_normalise_without_steps_keeps_the_text() -> None:
    assert normalise(" A, b ", ()) == " A, b "


@pytest.mark.parametrize(("spec", "text", "reference", "expected", "reason"), [
    ({"min": 1.0}, "refund in 14 days", "refund in 14 days", True, "ratio similarity 1.000"),
    ({"min": 0.9}, "refund in 14 day", "refund in 14 days", True, "0.970, at least 0.9"),
    ({"min": 0.9}, "no refund", "refund in 14 days", False, "below 0.9"),
    ({"min": 0.9, "method": "token_sort"}, "14 days refund in", "refund in 14 days", True, ""),
    ({"min": 1.0, "method": "partial"}, "yes: refund in 14 days.", "refund in 14 days", True,
     ""),
    ({"min": 1.0, "normalise": ["case", "punctuation"]}, "Refund, in 14 DAYS!",
     "refund in 14 days", True, ""),
    ({"min": 0.0}, "", "", True, ""), ({"min": 0.5}, "", "x", False, ""),
])
def test_similar(spec: dict[str, Any], text: str, reference: str, expected: bool,
                 reason: str) -> None:
    result = run({"check": "similar", **spec}, text, reference)
    assert result.score is expected and reason in result.reason, result


def test_similar_refuses_texts_past_its_bound_by_name() -> None:
    result = run({"check": "similar", "min": 0.5}, "x" * 100_001, "x")
    assert result.error_class == TOO_LARGE and "100,001 characters" in result.reason


@pytest.mark.parametrize(("spec", "text", "reference", "expected", "reason"), [
    ({}, '{"a": 1, "b": [1, 2]}', '{"b": [1, 2], "a": 1}', True, "equal JSON documents"),
    ({}, '{"a": 1.0}', '{"a": 1}', True, ""),
    ({}, '{"a": true}', '{"a": 1}', False, "differs at $.a"),
    ({}, '{"a": null}', '{"a": false}', False, "differs at $.a"),
    ({}, '{"a": {"b": [1, {"c": "x"}]}}', '{"a": {"b": [1, {"c": "y"}]}}', False,
     "differs at $.a.b[1].c"),
    ({}, '{"a": 1, "z": 2}', '{"a": 1}', False, "$.z (extra)"),
    ({}, '{"a": 1}', '{"a": 1, "b": 2}', False, "$.b (missing)"),
    ({}, "[1, 2]", "[1, 2, 3]", False, "$ (2 items, the reference has 3)"),
    ({"tolerance": 0.01}, '{"p": 9.995}', '{"p": 10}', True, ""),
    ({"tolerance": 0.01}, '{"p": 9.9}', '{"p": 10}', False, "$.p"),
    ({}, '"1"', "1", False, "differs at $"),
    ({}, "{", "{}", False, "the value is not valid JSON"),
    ({}, "{}", "nope", False, "the reference is not valid JSON"),
])
def test_json_equals(spec: dict[str, Any], text: str, reference: str, expected: bool,
                     reason: str) -> None:
    result = run({"check": "json_equals", **spec}, text, reference)
    assert result.score is expected and reason in result.reason, result


def test_json_equals_walks_the_deepest_documents_orjson_reads() -> None:
    deep = "[" * 1024 + "1" + "]" * 1024
    other = "[" * 1024 + "2" + "]" * 1024
    assert passes({"check": "json_equals"}, deep, deep) is True
    result = run({"check": "json_equals"}, deep, other)
    assert result.score is False and result.reason.startswith("differs at $[0][0][0]")


@pytest.mark.parametrize(("spec", "text", "expected", "reason"), [
    ({}, "SELECT id FROM orders WHERE total > 10", True, "1 statement(s), select"),
    ({}, "SELECT 1; DROP TABLE orders", True, "select, drop"),
    ({}, "SELEC * FROM orders", False, "not valid SQL"),
    ({}, "SELECT * FROM", False, "not valid SQL"),
    ({}, "SELECT 'unclosed", False, "not valid SQL"),
    ({}, "", False, "no SQL statement"),
    ({"statements": ["select"]}, "DELETE FROM orders", False, "a delete statement"),
    ({"dialect": "postgres"}, "SELECT x::int FROM t", True, ""),
])
def test_sql_valid(spec: dict[str, Any], text: str, expected: bool, reason: str) -> None:
    result = run({"check": "sql_valid", **spec}, text)
    assert result.score is expected and reason in result.reason, result


def test_sql_past_its_bound_or_nested_past_recursion_is_a_named_failure() -> None:
    assert run({"check": "sql_valid"}, "SELECT 1;" * 3000).error_class == TOO_LARGE
    nested = run({"check": "sql_valid"}, "SELECT " + "(" * 5000 + "1" + ")" * 5000)
    assert nested.error_class == TOO_LARGE and "nested too deep" in nested.reason


def test_an_unknown_sql_dialect_is_refused_when_the_metric_loads() -> None:
    with pytest.raises(ValueError, match="sqlglot knows no dialect 'postgress'"):
        SPEC.validate_python({"check": "sql_valid", "dialect": "postgress"})


HOSTILE_SPECS: list[dict[str, Any]] = [
    {"check": "json_valid"}, {"check": "json_schema", "schema": SCHEMA},
    {"check": "matches", "pattern": r"(a+)+$"}, {"check": "never_matches", "pattern": "sk-"},
    {"check": "equals", "normalise": ["case", "whitespace", "punctuation", "numbers"]},
    {"check": "contains_all", "values": ["x"], "normalise": ["numbers", "punctuation"]},
    {"check": "numeric", "tolerance": 1}, {"check": "length", "count": "tokens", "max": 10},
    {"check": "similar", "min": 0.5, "method": "token_set"}, {"check": "json_equals"},
    {"check": "sql_valid"},
]


@pytest.mark.parametrize("spec", HOSTILE_SPECS, ids=lambda spec: spec["check"])
def test_a_ten_megabyte_output_gets_a_named_result(spec: dict[str, Any]) -> None:
    text = ("1,234.5 aaaa " * (TEN_MB // 13 + 1))[:TEN_MB]
    result = run(spec, text, "1234.5")
    assert result.error_class in (None, TOO_LARGE), result
    assert result.score is not None or result.error_class == TOO_LARGE
    assert len(result.reason) <= 500


def test_a_large_json_document_is_too_large_for_a_schema_check_only() -> None:
    document = "[" + ",".join(["1"] * (MAX_SCHEMA_INSTANCE_CHARS // 2 + 1)) + "]"
    assert run({"check": "json_schema", "schema": {"type": "array"}}, document).error_class \
        == TOO_LARGE
    assert passes({"check": "json_valid"}, document) is True


@pytest.mark.parametrize("spec", HOSTILE_SPECS, ids=lambda spec: spec["check"])
def test_invalid_utf8_gets_a_named_result(spec: dict[str, Any]) -> None:
    text = b"caf\xe9 sk-\xff 12".decode("utf-8", "surrogateescape")  # unpaired surrogates
    result = run(spec, text, text)
    assert result.error_class is None and result.score is not None, result


def test_a_missing_value_or_reference_is_a_named_failure() -> None:
    runner = CheckRunner()
    for field, spec in (("fields.answer", {"check": "json_valid", "field": "fields.answer"}),
                        ("reference", {"check": "equals"})):
        parsed = SPEC.validate_python(spec)
        check = runner._prepare(LoadedCheck("c", parsed, check_version(parsed)))
        result = runner.run(check, Sample(id="s1", output="x")).result
        assert result.error_class == MISSING_INPUT and field in result.reason
    parsed = SPEC.validate_python({"check": "json_valid", "field": "fields.answer"})
    check = runner._prepare(LoadedCheck("c", parsed, check_version(parsed)))
    sample = Sample(id="s1", fields={"answer": {"a": [1, 2]}})
    assert runner.run(check, sample).result.score is True  # structured values as JSON
