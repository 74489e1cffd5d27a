"""The trajectory's JSON form: read, written back, and refused by name."""

from __future__ import annotations

import time
from typing import Any

import pytest

from evalfleet.core.errors import InvalidSample
from evalfleet.core.sample import parse_sample
from evalfleet.core.trajectory import ModelStep, ToolStep, Trajectory, text_sizes
from producers.limits import FieldLimits, check_limits
from producers.redact import RedactionRules, Redactor, redact_sample

RUN: dict[str, Any] = {
    "steps": [
        {"type": "model", "model": "m-1",
         "input": [{"role": "user", "content": "Weather in Oslo?"}],
         "output": [{"role": "assistant", "content": "",
                     "tool_calls": [{"id": "c1", "name": "weather",
                                     "arguments": {"city": "Oslo"}}]}]},
        {"type": "tool", "name": "weather", "call_id": "c1", "arguments": {"city": "Oslo"},
         "result": {"temp_c": 4, "sky": "rain"}, "error": None, "duration_ms": 12.5},
        {"type": "retrieval", "query": "coat", "documents": ["Wear a coat below 10 C."]},
        {"type": "handoff", "agent": "stylist"},
    ],
    "tools": [{"name": "weather", "description": "Current weather",
               "parameters": {"type": "object",
                              "properties": {"city": {"type": "string"}}}}],
    "final_answer": "4 C and rain.",
}


def record(**trajectory: Any) -> dict[str, Any]:
    return {"id": "run-1", "input": "Weather in Oslo?", "output": "4 C and rain.",
            "trajectory": trajectory or RUN}


def test_a_trajectory_reads_and_writes_back_the_same() -> None:
    sample = parse_sample(record())
    assert sample.trajectory is not None
    assert isinstance(sample.trajectory.steps[0], ModelStep)
    assert isinstance(sample.trajectory.steps[1], ToolStep)
    assert sample.to_json()["trajectory"] == Trajectory.model_validate(RUN).model_dump(mode="json")
    assert parse_sample(sample.to_json()) == sample


def test_a_sample_without_one_writes_no_trajectory_key() -> None:
    assert "trajectory" not in parse_sample({"id": "a", "input": "q"}).to_json()


@pytest.mark.parametrize(("trajectory", "field"), [
    ({"steps": [{"type": "tool"}]}, "trajectory.steps[0].name"),
    ({"steps": [{"type": "model", "input": [{"content": "x"}]}]},
     "trajectory.steps[0].input[0].role"),
    ({"steps": [{"type": "tool", "name": "t", "duration_ms": -1}]},
     "trajectory.steps[0].duration_ms"),
    ({"steps": [{"type": "handoff", "agent": "a", "extra": 1}]}, "trajectory.steps[0].extra"),
    ({"tools": [{"description": "x"}]}, "trajectory.tools[0].name"),
    ({"final_answer": 3}, "trajectory.final_answer"),
])
def test_a_bad_part_is_named_by_its_path(trajectory: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidSample) as caught:
        parse_sample(record(**trajectory), record="line 4")
    assert caught.value.field == field
    assert "line 4" in str(caught.value)


def test_redaction_reaches_every_string_of_the_trajectory() -> None:
    secret = "ann@example.com"
    run = {"steps": [
        {"type": "model", "input": [{"role": "user", "content": f"mail {secret}"}],
         "output": [{"role": "assistant",
                     "tool_calls": [{"name": "send", "arguments": {"to": secret}}]}]},
        {"type": "tool", "name": "send", "arguments": f'{{"to": "{secret}"}}',
         "result": {"sent": [secret]}, "error": f"bounced {secret}"},
        {"type": "retrieval", "query": secret, "documents": [secret]}],
        "tools": [{"name": "send", "description": secret, "parameters": {"default": secret}}],
        "final_answer": f"sent to {secret}"}
    redacted, counts = redact_sample(parse_sample(record(**run)),
                                     redactor=Redactor(RedactionRules()))
    assert redacted.trajectory is not None
    assert secret not in redacted.trajectory.model_dump_json()
    assert counts["email"] == 10


def test_text_sizes_name_each_part() -> None:
    paths = {path: size for path, size in text_sizes(Trajectory.model_validate(RUN))}
    assert paths["trajectory.steps[0].input[0].content"] == len("Weather in Oslo?")
    assert paths["trajectory.steps[1].result"] == len('{"temp_c": 4, "sky": "rain"}')
    assert paths["trajectory.steps[2].documents[0]"] == len("Wear a coat below 10 C.")


@pytest.mark.parametrize(("trajectory", "field", "words"), [
    ({"steps": [{"type": "handoff", "agent": "a"}] * 1001}, "trajectory.steps", "1,001 items"),
    ({"steps": [{"type": "model", "input": [{"role": "u"}] * 1001}]},
     "trajectory.steps[0].input", "1,001 items"),
    ({"steps": [{"type": "tool", "name": "t", "result": "r" * 70_000}]},
     "trajectory.steps[0].result", "70,000 characters"),
    ({"steps": [{"type": "tool", "name": "t", "arguments": {"k": "v" * 70_000}}]},
     "trajectory.steps[0].arguments", "over the limit of 65,536"),
    ({"steps": [{"type": "tool", "name": "t", "result": "r" * 60_000}] * 80},
     "trajectory.steps[69].result", "4,194,304 characters"),
])
def test_limits_name_the_part_over_them(trajectory: dict[str, Any], field: str,
                                        words: str) -> None:
    sample = parse_sample(record(**trajectory))
    with pytest.raises(InvalidSample) as caught:
        check_limits(sample, limits=FieldLimits(), record="line 2")
    assert caught.value.field == field and words in str(caught.value)


def test_the_trajectory_field_limit_is_its_own() -> None:
    sample = parse_sample(record(steps=[{"type": "tool", "name": "t", "result": "r" * 70_000}]))
    check_limits(sample, limits=FieldLimits(per_field={"trajectory": 100_000}))


def test_a_50_mb_tool_result_is_refused_in_linear_time() -> None:
    started = time.perf_counter()
    sample = parse_sample(record(steps=[{"type": "tool", "name": "t",
                                         "result": "r" * 50_000_000}]))
    with pytest.raises(InvalidSample) as caught:
        check_limits(sample, limits=FieldLimits())
    assert caught.value.field == "trajectory.steps[0].result"
    assert time.perf_counter() - started < 30  # a bound on a hang, not a speed figure


def test_the_kept_evidence_holds_the_trajectory_and_no_key_without_one() -> None:
    from evalfleet.store.queries.evidence import sample_content
    assert sample_content(parse_sample(record()).to_json())["trajectory"]["final_answer"] == (
        "4 C and rain.")
    assert "trajectory" not in sample_content(parse_sample({"id": "a"}).to_json())
