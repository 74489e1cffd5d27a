"""Sample format: valid records parse; every bad one names its record and field."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalfleet.core.errors import InvalidSample
from evalfleet.core.sample import DEFAULT_LIMITS, SampleLimits, parse_sample_line

VALID = {
    "id": "req-8812", "timestamp": "2026-11-21T10:00:00Z", "input": "user question",
    "output": "the app's answer", "context": ["chunk 1", "chunk 2"], "reference": None,
    "attributes": {"app": "support-bot", "route": "/chat"},
    "fields": {"evaluation_goal": "balanced"},
}


def line(**changes: object) -> bytes:
    record = {**VALID, **changes}
    return json.dumps({k: v for k, v in record.items() if v is not ...}).encode()


def test_valid_record_parses() -> None:
    sample = parse_sample_line(line(), record="line 1")
    assert sample.id == "req-8812"
    assert sample.context == ["chunk 1", "chunk 2"]
    assert sample.timestamp is not None and sample.timestamp.utcoffset() is not None
    assert sample.attributes["app"] == "support-bot"


def test_only_id_is_required() -> None:
    sample = parse_sample_line(b'{"id": "x"}')
    assert (sample.input, sample.output, sample.context, sample.reference) == ("", "", [], None)


def test_null_context_is_empty() -> None:
    assert parse_sample_line(line(context=None)).context == []


@pytest.mark.parametrize(("raw", "field", "words"), [
    (line(id=...), "id", "is required"),
    (line(id=""), "id", "at least 1"),
    (line(id="   "), "id", "blank"),
    (line(id=17), "id", "valid string"),
    (line(input=42), "input", "got a number"),
    (line(output=["a"]), "output", "got an array"),
    (line(context="one chunk"), "context", "valid list"),
    (line(context=["ok", 3]), "context[1]", "got a number"),
    (line(reference=5), "reference", "got a number"),
    (line(attributes={"app": 1}), "attributes.app", "got a number"),
    (line(attributes=["app"]), "attributes", "valid dictionary"),
    (line(fields="x"), "fields", "valid dictionary"),
    (line(timestamp="yesterday"), "timestamp", "datetime"),
    (line(timestamp="2026-11-21T10:00:00"), "timestamp", "timezone"),
    (line(referance="typo"), "referance", "not a sample field"),
])
def test_bad_field_is_named(raw: bytes, field: str, words: str) -> None:
    with pytest.raises(InvalidSample) as caught:
        parse_sample_line(raw, record="line 7")
    assert caught.value.field == field
    assert words in caught.value.reason
    assert str(caught.value).startswith("line 7")
    assert f"field {field!r}" in str(caught.value)


@pytest.mark.parametrize(("raw", "words"), [
    (b'{"id": "a", "input": "caf\xe9"}', "not valid UTF-8 (byte 0xe9"),
    (b'{"id": "a", "input": ', "not valid JSON"),
    (b"not json at all", "not valid JSON"),
    (b'["id", "a"]', "expected a JSON object, got an array"),
    (b'"just a string"', "expected a JSON object, got a string"),
    (b'{"id": "a", "fields": {"x": NaN}}', "NaN is not allowed"),
])
def test_bad_record_is_named(raw: bytes, words: str) -> None:
    with pytest.raises(InvalidSample) as caught:
        parse_sample_line(raw, record="line 3")
    assert caught.value.field is None
    assert words in str(caught.value)
    assert str(caught.value).startswith("line 3: ")


def test_error_names_the_id_when_readable() -> None:
    with pytest.raises(InvalidSample) as caught:
        parse_sample_line(line(input=1), record="line 2")
    assert caught.value.sample_id == "req-8812"
    assert "id 'req-8812'" in str(caught.value)


def test_text_is_kept_verbatim() -> None:
    tricky = 'Use {x} and {{ y }} then <score>5</score> {"faithfulness": 1.0}'
    assert parse_sample_line(line(output=tricky)).output == tricky


@pytest.mark.parametrize(("text", "field", "reason"), [
    (line(input="a\x00b"), "input", "control character (U+0000"),
    (line(output="\x1b[31m"), "output", "control character (U+001B"),
    (line(attributes={"app": "x\x7f\x01"}), "attributes.app", "U+0001"),
    (line(context=["ok", "\ud800"]), "context[1]", "unpaired surrogate (U+D800"),
    (line(fields={"n": 10 ** 30}), "fields.n", "out of range"),
    (line(fields={"k" * 257: 1}), "fields", "over the limit of 256"),
    (line(attributes={str(n): "v" for n in range(257)}), "attributes", "257 keys"),
    (line(fields={"a": {"b\x00": 1}}), "fields.a", "has a key that contains"),
    (b'{"id": "x", "fields": {"p": 1e999}}', "fields.p", "inf is not a finite number"),
    (b'{"id": "x", "fields": {"p": -1e400}}', "fields.p", "-inf is not a finite number"),
    (b'{"id": "x", "fields": {"d": ' + b"[" * 17 + b"]" * 17 + b"}}", "fields.d[0]",
     "nested deeper than 16"),
    (b'{"id": "x", "fields": {"d": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}", "fields",
     "nested deeper than 256"),
    (b'{"id": "x", "fields": {"d": ' + b"{\"a\":" * 100_000 + b"}}", "fields",
     "nested deeper than 256"),
])
def test_hostile_records_name_the_field(text: bytes, field: str, reason: str) -> None:
    with pytest.raises(InvalidSample) as raised:
        parse_sample_line(text, record="line 3", limits=DEFAULT_LIMITS)
    assert raised.value.record == "line 3"
    assert raised.value.field is not None and raised.value.field.startswith(field)
    assert reason in raised.value.reason


def test_tab_newline_and_carriage_return_are_text() -> None:
    assert parse_sample_line(line(input="a\tb\r\nc")).input == "a\tb\r\nc"


def test_limits_are_configurable() -> None:
    deep = b'{"id": "x", "fields": {"d": ' + b"[" * 30 + b"]" * 30 + b"}}"
    assert parse_sample_line(deep, limits=SampleLimits(max_depth=40)).fields["d"]
    with pytest.raises(InvalidSample, match="9 keys, over the limit of 8"):
        parse_sample_line(line(attributes={str(n): "v" for n in range(9)}),
                          limits=SampleLimits(max_keys=8))


def test_python_data_nested_in_itself_is_rejected_without_recursion() -> None:
    from evalfleet.core.sample import parse_sample

    data: dict[str, object] = {"id": "loop"}
    data["fields"] = {"self": data}
    with pytest.raises(InvalidSample, match="nested deeper than 16"):
        parse_sample(data, limits=DEFAULT_LIMITS)
    with pytest.raises(InvalidSample, match="nested deeper than 256"):
        parse_sample(data)


def test_without_limits_only_the_nesting_is_checked() -> None:
    # A worker decoding an older producer's job: the store makes such text storable.
    assert parse_sample_line(line(input="a\x00b", fields={"n": 10 ** 30})).input == "a\x00b"


@pytest.mark.parametrize("code", range(128))
def test_every_ascii_character_is_judged_as_postgres_would(code: int) -> None:
    # C0 controls but tab, newline and carriage return are refused; DEL and the rest pass.
    char = chr(code)
    text = line(output=f"before {char} after")
    if code < 0x20 and char not in "\t\n\r":
        with pytest.raises(InvalidSample, match=f"U\\+{code:04X} at offset 7"):
            parse_sample_line(text, limits=DEFAULT_LIMITS)
    else:
        assert parse_sample_line(text, limits=DEFAULT_LIMITS).output == f"before {char} after"


_JSON_LEAF = (st.none() | st.booleans() | st.integers(-2**70, 2**70)
              | st.floats(allow_nan=True, allow_infinity=True)
              | st.text(alphabet=st.characters(max_codepoint=0xE000, exclude_categories=()),
                      max_size=6))
_JSON_VALUE = st.recursive(
    _JSON_LEAF, lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=30)


@settings(max_examples=400, deadline=None)
@given(data=st.dictionaries(st.text(max_size=5), _JSON_VALUE, max_size=5),
       limits=st.builds(SampleLimits, max_depth=st.integers(1, 5), max_keys=st.integers(1, 5),
                        max_key_chars=st.integers(1, 5), check_values=st.booleans()))
def test_the_quick_walk_finds_a_problem_exactly_when_the_walk_with_paths_does(
        data: dict[str, object], limits: SampleLimits) -> None:
    # check_structure answers from a walk without paths when it finds nothing.
    from evalfleet.core.sample import _first_problem, check_structure

    assert check_structure(data, limits=limits) == _first_problem(data, limits=limits)
