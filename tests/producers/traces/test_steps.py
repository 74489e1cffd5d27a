"""From spans to an agent trajectory: GenAI, OpenInference, Traceloop; a trace without
tools or agents keeps no trajectory."""

from __future__ import annotations

import json
from typing import Any

from producers.traces.config import TraceSpec
from producers.traces.mapping import map_trace
from tests.producers.traces.test_mapping import GENAI_CHAT, OPENINFERENCE_LLM, root, span

WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}},
                  "required": ["city"]}


def trajectory_of(spans: list[Any]) -> dict[str, Any] | None:
    (sample,) = map_trace(spans, spec=TraceSpec()).samples
    return sample.record.get("trajectory")


def genai_chat(inputs: list[Any], outputs: list[Any], **more: Any) -> dict[str, Any]:
    return {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m-1",
            "gen_ai.input.messages": json.dumps(inputs),
            "gen_ai.output.messages": json.dumps(outputs), **more}


USER = {"role": "user", "parts": [{"type": "text", "content": "Weather in Oslo?"}]}
CALL = {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "weather",
                                        "arguments": {"city": "Oslo"}}]}
ANSWER = {"role": "assistant", "parts": [{"type": "text", "content": "4 C and rain."}],
          "finish_reason": "stop"}


def response(key: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"type": "tool_call_response", "id": "c1",
                                       key: "4 C, rain"}]}


def test_genai_agent_with_execute_tool_spans() -> None:
    definitions = json.dumps([{"type": "function", "name": "weather",
                               "description": "Weather now", "parameters": WEATHER_SCHEMA}])
    spans = [
        root({"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "helper"}),
        span("b1", genai_chat([USER], [CALL], **{"gen_ai.tool.definitions": definitions}),
             start=1, end=2),
        span("b2", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "weather",
                    "gen_ai.tool.call.id": "c1", "gen_ai.tool.call.arguments": '{"city":"Oslo"}',
                    "gen_ai.tool.call.result": "4 C, rain"}, start=3, end=4),
        span("b3", genai_chat([USER, CALL, response("result")], [ANSWER]), start=5, end=6),
    ]
    trajectory = trajectory_of(spans)
    assert trajectory is not None
    steps = trajectory["steps"]
    assert [s["type"] for s in steps] == ["model", "tool", "model"]
    assert steps[0]["output"][0]["tool_calls"] == [
        {"name": "weather", "id": "c1", "arguments": {"city": "Oslo"}}]
    assert steps[1] == {"type": "tool", "name": "weather", "call_id": "c1",
                        "arguments": {"city": "Oslo"}, "result": "4 C, rain", "error": None,
                        "duration_ms": 1000.0}
    # The second call keeps only what is new: the tool's response.
    assert steps[2]["input"] == [{"role": "tool", "content": "4 C, rain", "tool_calls": [],
                                  "tool_call_id": "c1"}]
    assert trajectory["tools"] == [{"name": "weather", "description": "Weather now",
                                    "parameters": WEATHER_SCHEMA}]
    assert trajectory["final_answer"] == "4 C and rain."
    (sample,) = map_trace(spans, spec=TraceSpec()).samples
    assert sample.record["attributes"]["agent"] == "helper"


def test_genai_structured_arguments_and_a_response_under_either_key() -> None:
    for key in ("response", "result"):
        spans = [root(), span("b1", genai_chat([USER], [CALL]), start=1, end=2),
                 span("b3", genai_chat([USER, CALL, response(key)], [ANSWER]), start=5, end=6)]
        trajectory = trajectory_of(spans)
        assert trajectory is not None
        # No tool span: the model's call becomes the tool step, its result the response.
        tool = trajectory["steps"][1]
        assert (tool["name"], tool["arguments"], tool["result"]) == (
            "weather", {"city": "Oslo"}, "4 C, rain")


def test_genai_tool_call_values_may_be_structured() -> None:
    spans = [root(), span("b2", {"gen_ai.operation.name": "execute_tool",
                                 "gen_ai.tool.name": "weather",
                                 "gen_ai.tool.call.arguments": {"city": "Oslo"},
                                 "gen_ai.tool.call.result": {"temp_c": 4}}, start=3, end=4),
             span("b3", genai_chat([USER], [ANSWER]), start=5, end=6)]
    tool = trajectory_of(spans)["steps"][0]  # type: ignore[index]
    assert (tool["arguments"], tool["result"]) == ({"city": "Oslo"}, {"temp_c": 4})


OI_LLM_CALL = {
    "openinference.span.kind": "LLM", "llm.model_name": "m-1",
    "llm.input_messages.0.message.role": "user",
    "llm.input_messages.0.message.content": "Weather in Oslo?",
    "llm.output_messages.0.message.role": "assistant",
    "llm.output_messages.0.message.tool_calls.0.tool_call.id": "c1",
    "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "weather",
    "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments":
        '{"city": "Oslo"}',
    "llm.tools.0.tool.json_schema": json.dumps(
        {"type": "function", "function": {"name": "weather", "parameters": WEATHER_SCHEMA}}),
}


def test_openinference_tool_and_agent_spans() -> None:
    spans = [
        root({"openinference.span.kind": "AGENT"}),
        span("b0", {"openinference.span.kind": "AGENT", "agent.name": "triage"}, start=0),
        span("b1", OI_LLM_CALL, start=1, end=2),
        span("b2", {"openinference.span.kind": "TOOL", "tool.name": "weather",
                    "input.value": '{"city": "Oslo"}', "output.value": "4 C, rain",
                    "output.mime_type": "text/plain",
                    "tool.parameters": json.dumps(WEATHER_SCHEMA)}, start=3, end=4),
        span("b4", {"openinference.span.kind": "AGENT", "agent.name": "stylist"}, start=5),
        span("b5", OPENINFERENCE_LLM, start=6, end=7),
    ]
    trajectory = trajectory_of(spans)
    assert trajectory is not None
    steps = trajectory["steps"]
    assert [s["type"] for s in steps] == ["model", "tool", "handoff", "model"]
    assert steps[0]["output"][0]["tool_calls"] == [
        {"name": "weather", "id": "c1", "arguments": {"city": "Oslo"}}]
    assert (steps[1]["name"], steps[1]["arguments"], steps[1]["result"]) == (
        "weather", {"city": "Oslo"}, "4 C, rain")
    assert steps[2] == {"type": "handoff", "agent": "stylist"}
    (sample,) = map_trace(spans, spec=TraceSpec()).samples
    assert sample.record["attributes"]["agent"] == "triage"
    assert trajectory["tools"] == [{"name": "weather", "description": None,
                                    "parameters": WEATHER_SCHEMA}]


def test_traceloop_tool_and_agent_spans() -> None:
    spans = [
        root({"traceloop.span.kind": "workflow", "traceloop.entity.name": "trip"}),
        span("b0", {"traceloop.span.kind": "agent", "traceloop.entity.name": "planner"}),
        span("b1", {"traceloop.span.kind": "tool", "traceloop.entity.name": "weather",
                    "traceloop.entity.input": json.dumps({"args": [], "kwargs": {"city": "Oslo"}}),
                    "traceloop.entity.output": '"4 C, rain"'}, start=2, end=3),
        span("b2", {"gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "Weather?",
                    "gen_ai.completion.0.role": "assistant",
                    "gen_ai.completion.0.content": "4 C and rain."}, start=4, end=5),
    ]
    trajectory = trajectory_of(spans)
    assert trajectory is not None
    assert [s["type"] for s in trajectory["steps"]] == ["tool", "model"]
    assert trajectory["steps"][0]["arguments"] == {"city": "Oslo"}
    assert trajectory["steps"][0]["result"] == "4 C, rain"


def test_a_trace_without_tools_or_agents_has_no_trajectory() -> None:
    for llm in (OPENINFERENCE_LLM, GENAI_CHAT):
        spans = [root(), span("b1", llm, start=1, end=2)]
        assert trajectory_of(spans) is None


def test_the_trajectory_passes_the_sample_check() -> None:
    from evalfleet.core.sample import parse_sample
    spans = [root({"openinference.span.kind": "AGENT"}), span("b1", OI_LLM_CALL, start=1, end=2),
             span("b5", OPENINFERENCE_LLM, start=6, end=7)]
    (sample,) = map_trace(spans, spec=TraceSpec()).samples
    parsed = parse_sample(sample.record)
    assert parsed.trajectory is not None and parsed.trajectory.steps[1].type == "tool"


def test_values_nested_past_the_records_limit_stay_text_and_the_sample_passes() -> None:
    from evalfleet.core.sample import DEFAULT_LIMITS, parse_sample
    deep_text = "[" * 30 + "]" * 30
    deep_value: Any = []
    for _ in range(29):
        deep_value = [deep_value]
    spans = [root({"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}),
             span("b1", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t",
                         "gen_ai.tool.call.arguments": deep_text,
                         "gen_ai.tool.call.result": deep_value}, start=1, end=2),
             span("b2", genai_chat([USER], [{"role": "assistant", "parts": [
                 {"type": "tool_call", "name": "t", "arguments": deep_value},
                 {"type": "text", "content": "done"}]}]), start=3, end=4)]
    (sample,) = map_trace(spans, spec=TraceSpec()).samples
    tool = sample.record["trajectory"]["steps"][0]
    assert tool["arguments"] == deep_text and tool["result"] == json.dumps(deep_value)
    parse_sample(sample.record, limits=DEFAULT_LIMITS)
