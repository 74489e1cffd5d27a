"""Field size limits: clear errors naming the record, id and field."""

from __future__ import annotations

import pytest

from evalfleet.core.errors import InvalidSample
from evalfleet.core.sample import Sample, parse_sample
from evalfleet.core.settings import Settings
from producers.limits import FieldLimits, check_limits
from tests.producers.builders import sample

LIMITS = FieldLimits(max_chars=100, per_field={"context": 50, "fields.summary": 10},
                     max_context_items=3)


@pytest.mark.parametrize(("overrides", "field", "message"), [
    ({"input": "x" * 101}, "input", "101 characters, over the limit of 100"),
    ({"output": "x" * 150}, "output", "150 characters, over the limit of 100"),
    ({"reference": "x" * 101}, "reference", "101 characters"),
    ({"context": ["ok", "x" * 51]}, "context[1]", "51 characters, over the limit of 50"),
    ({"context": ["a", "b", "c", "d"]}, "context", "4 items, over the limit of 3"),
    ({"attributes": {"app": "x" * 101}}, "attributes.app", "101 characters"),
    ({"fields": {"summary": "x" * 11}}, "fields.summary", "11 characters, over the limit of 10"),
    ({"fields": {"other": {"deep": "x" * 100}}}, "fields.other", "over the limit of 100"),
])
def test_over_the_limit_names_record_id_and_field(
    overrides: dict[str, object], field: str, message: str,
) -> None:
    with pytest.raises(InvalidSample) as caught:
        check_limits(sample(7, **overrides), limits=LIMITS, record="line 9")
    assert caught.value.field == field
    assert caught.value.record == "line 9" and caught.value.sample_id == "req-00007"
    assert message in str(caught.value)
    assert str(caught.value).startswith(f"line 9, id 'req-00007', field '{field}': ")


@pytest.mark.parametrize("overrides", [
    {"input": "x" * 100}, {"context": ["x" * 50] * 3}, {"fields": {"summary": "x" * 10}},
    {"fields": {"price": 12.5, "tags": ["a", "b"]}}, {"reference": None},
])
def test_at_or_under_the_limit_passes(overrides: dict[str, object]) -> None:
    check_limits(sample(1, **overrides), limits=LIMITS)


def test_the_documented_message() -> None:
    limits = FieldLimits()
    with pytest.raises(InvalidSample) as caught:
        check_limits(sample(1, id="x", context=["a", "b", "c", "x" * 80_123]), limits=limits,
                     record="line 9")
    assert str(caught.value) == ("line 9, id 'x', field 'context[3]': 80,123 characters, "
                                 "over the limit of 65,536")


def test_limits_from_settings() -> None:
    settings = Settings(max_field_chars=10, field_char_limits={"input": 5}, max_context_items=2)
    limits = FieldLimits.from_settings(settings)
    assert limits.limit_for("input") == 5
    assert limits.limit_for("output") == 10
    assert limits.limit_for("context[4]") == 10
    assert limits.max_context_items == 2


def session_record(turns: list[dict[str, object]]) -> Sample:
    return parse_sample({"id": "conv-1#2-abc", "session": {"id": "conv-1", "turns": turns}})


def test_a_session_over_its_turns_or_characters_is_refused_naming_the_field() -> None:
    turn = {"trace_id": "t", "input": "q", "output": "a"}
    limits = FieldLimits(max_session_turns=3, max_session_chars=100)
    check_limits(session_record([turn] * 3), limits=limits)
    with pytest.raises(InvalidSample) as many:
        check_limits(session_record([turn] * 4), limits=limits, record="line 2")
    assert (many.value.field, many.value.record) == ("session.turns", "line 2")
    assert "4 turns, over the limit of 3" in str(many.value)
    long = {"trace_id": "t", "input": "q" * 60, "output": "a"}
    with pytest.raises(InvalidSample) as large:
        check_limits(session_record([long, long]), limits=limits)
    assert large.value.field == "session.turns[1]"
    assert "pass 100 characters" in str(large.value)


def test_a_turns_trajectory_is_held_to_the_trajectory_limits_naming_the_turn() -> None:
    steps = [{"type": "tool", "name": "t", "result": "r"}] * 5
    turns = [{"trace_id": "a"}, {"trace_id": "b", "trajectory": {"steps": steps}}]
    with pytest.raises(InvalidSample) as error:
        check_limits(session_record(turns), limits=FieldLimits(max_trajectory_steps=4))
    assert error.value.field == "session.turns[1].trajectory.steps"


def test_a_huge_session_passes_up_to_the_default_turns_and_not_past_them() -> None:
    steps = [{"type": "tool", "name": "t", "arguments": {"q": "x"}, "result": "r" * 100}] * 10
    turns = [{"trace_id": f"t{n}", "input": "q", "output": "a", "trajectory": {"steps": steps}}
             for n in range(1001)]
    check_limits(session_record(turns[:1000]), limits=FieldLimits())
    with pytest.raises(InvalidSample, match="1,001 turns, over the limit of 1,000"):
        check_limits(session_record(turns), limits=FieldLimits())
