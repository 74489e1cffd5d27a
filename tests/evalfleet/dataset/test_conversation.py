"""An agent's run as a chat fine-tuning conversation: from the trajectories the trace
mapping builds (GenAI, OpenInference) and those a JSONL line carries."""

from __future__ import annotations

import json
from typing import Any

import pytest

from evalfleet.core.trajectory import Trajectory
from evalfleet.dataset.conversation import Unconvertible, chat_conversation
from tests.producers.traces.test_mapping import root, span
from tests.producers.traces.test_steps import (
    ANSWER,
    CALL,
    OI_LLM_CALL,
    USER,
    WEATHER_SCHEMA,
    genai_chat,
    response,
    trajectory_of,
)


def check_format(record: dict[str, Any]) -> None:
    """What OpenAI's chat fine-tuning asks of a line with tool calls: known roles; every
    assistant tool call (arguments as JSON text) answered by a tool message before the
    next assistant or user message; no tool message answering nothing; an assistant last."""
    assert set(record) <= {"messages", "tools"}
    open_ids: list[str] = []
    for message in record["messages"]:
        assert message["role"] in ("system", "user", "assistant", "tool")
        if message["role"] == "tool":
            assert message["tool_call_id"] in open_ids
            open_ids.remove(message["tool_call_id"])
            assert isinstance(message["content"], str)
            continue
        assert open_ids == [], f"unanswered calls before a {message['role']} message"
        for call in message.get("tool_calls", []):
            assert call["type"] == "function" and isinstance(call["function"]["arguments"], str)
            json.loads(call["function"]["arguments"])
            open_ids.append(call["id"])
    assert open_ids == [] and record["messages"][-1]["role"] == "assistant"
    for tool in record.get("tools", []):
        assert tool["type"] == "function" and isinstance(tool["function"]["parameters"], dict)


def convert(data: dict[str, Any], question: str | None = "Weather in Oslo?") -> dict[str, Any]:
    record = chat_conversation(Trajectory.model_validate(data), question=question)
    check_format(record)
    return record


def test_a_genai_trace_with_tool_spans() -> None:
    spans = [root({"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "helper"}),
             span("b1", genai_chat([USER], [CALL], **{"gen_ai.tool.definitions": json.dumps(
                 [{"type": "function", "name": "weather", "description": "Weather now",
                   "parameters": WEATHER_SCHEMA}])}), start=1, end=2),
             span("b2", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "weather",
                         "gen_ai.tool.call.id": "c1", "gen_ai.tool.call.arguments":
                             '{"city":"Oslo"}', "gen_ai.tool.call.result": "4 C, rain"},
                  start=3, end=4),
             span("b3", genai_chat([USER, CALL, response("result")], [ANSWER]), start=5, end=6)]
    record = convert(trajectory_of(spans))  # type: ignore[arg-type]
    assert record == {
        "messages": [
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "4 C, rain"},
            {"role": "assistant", "content": "4 C and rain."}],
        "tools": [{"type": "function", "function": {
            "name": "weather", "description": "Weather now", "parameters": WEATHER_SCHEMA}}]}


def test_an_openinference_trace_whose_tool_spans_carry_no_call_id() -> None:
    answer = {"openinference.span.kind": "LLM", "llm.model_name": "m-1",
              "llm.output_messages.0.message.role": "assistant",
              "llm.output_messages.0.message.content": "4 C and rain."}
    spans = [root({"openinference.span.kind": "AGENT", "input.value": "Weather in Oslo?",
                   "output.value": "4 C and rain."}),
             span("b1", OI_LLM_CALL, start=1, end=2),
             span("b2", {"openinference.span.kind": "TOOL", "tool.name": "weather",
                         "input.value": '{"city": "Oslo"}', "output.value": "4 C, rain"},
                  start=3, end=4),
             span("b5", answer, start=6, end=7)]
    messages = convert(trajectory_of(spans))["messages"]  # type: ignore[arg-type]
    # The tool step answers the model's call c1 by its name, right after it.
    assert [(m["role"], m.get("tool_call_id")) for m in messages] == [
        ("user", None), ("assistant", None), ("tool", "c1"), ("assistant", None)]
    assert messages[2]["content"] == "4 C, rain"


def model(inputs: list[Any], outputs: list[Any]) -> dict[str, Any]:
    return {"type": "model", "input": inputs, "output": outputs}


def ask(*calls: tuple[str | None, str]) -> dict[str, Any]:
    return {"role": "assistant", "content": "",
            "tool_calls": [{"id": i, "name": n, "arguments": {"q": n}} for i, n in calls]}


def tool(name: str, call_id: str | None = None, **more: Any) -> dict[str, Any]:
    return {"type": "tool", "name": name, "call_id": call_id, "arguments": {"q": name},
            "result": more.pop("result", f"{name} says hi"), **more}


SYSTEM = {"role": "system", "content": "Be brief."}
ASK = {"role": "user", "content": "Weather and time?"}


def test_a_producer_that_repeats_the_whole_conversation_each_call() -> None:
    first_out = ask(("a", "weather"), ("b", "clock"))
    answers = [{"role": "tool", "tool_call_id": "a", "content": "rain"},
               {"role": "tool", "tool_call_id": "b", "content": "10:00"}]
    data = {"steps": [model([SYSTEM, ASK], [first_out]),
                      tool("weather", "a"), tool("clock", "b"),
                      model([SYSTEM, ASK, first_out, *answers],
                            [{"role": "assistant", "content": "Rain at ten."}])],
            "final_answer": "Rain at ten."}
    messages = convert(data)["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool",
                                             "assistant"]
    assert [m["content"] for m in messages[3:5]] == ["rain", "10:00"]  # the model's view


def test_tool_steps_nobody_asked_for_and_calls_without_ids() -> None:
    data = {"steps": [tool("search", result={"hits": 2}),
                      model([], [ask((None, "fetch"))]),
                      tool("fetch", error="timeout", result=None)],
            "final_answer": "Could not fetch it."}
    messages = convert(data)["messages"]
    assert messages[0] == {"role": "user", "content": "Weather in Oslo?"}  # the question
    assert [(m["role"], m.get("tool_call_id")) for m in messages[1:]] == [
        ("assistant", None), ("tool", "call_1"), ("assistant", None), ("tool", "call_2"),
        ("assistant", None)]
    assert (messages[2]["content"], messages[4]["content"]) == ('{"hits": 2}', "error: timeout")
    assert messages[-1] == {"role": "assistant", "content": "Could not fetch it."}


@pytest.mark.parametrize(("data", "why"), [
    ({"steps": [model([ASK], [ask(("a", "weather"))])], "final_answer": "x"},
     "tool call 'weather' (a) has no result in the trajectory"),
    ({"steps": [tool("search")]}, "the run ends without an answer from the assistant"),
])
def test_a_run_that_cannot_be_a_conversation_says_why(data: dict[str, Any], why: str) -> None:
    with pytest.raises(Unconvertible, match=why.replace("(", r"\(").replace(")", r"\)")):
        chat_conversation(Trajectory.model_validate(data), question="q")
