"""The simulator as an agent's model: one call to each offered tool, then an answer."""

from __future__ import annotations

import json

import httpx

from evalfleet.judgesim import RunningSim
from evalfleet.judgesim.tools import agent_turn

TOOLS = [{"type": "function", "function": {
             "name": "weather", "parameters": {
                 "type": "object", "properties": {"city": {"type": "string"},
                                                  "days": {"type": "integer", "minimum": 1,
                                                           "maximum": 7}},
                 "required": ["city", "days"]}}},
         {"type": "function", "function": {"name": "clock", "parameters": {"type": "object"}}}]


def chat(sim: RunningSim, messages: list[dict[str, object]]) -> dict[str, object]:
    response = httpx.post(f"{sim.base_url}/chat/completions", json={
        "model": "agent-m", "messages": messages, "tools": TOOLS}, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]  # type: ignore[no-any-return]


def test_each_tool_is_called_once_in_order_then_the_model_answers(sim: RunningSim) -> None:
    messages: list[dict[str, object]] = [{"role": "user", "content": "Oslo weekend"}]
    first = chat(sim, messages)
    assert first["finish_reason"] == "tool_calls"
    (call,) = first["message"]["tool_calls"]  # type: ignore[index]
    arguments = json.loads(call["function"]["arguments"])
    assert call["function"]["name"] == "weather" and arguments["city"] == "Oslo weekend"
    assert 1 <= arguments["days"] <= 7
    assert chat(sim, messages) == first  # deterministic
    messages += [first["message"], {"role": "tool", "tool_call_id": call["id"],  # type: ignore[list-item]
                                     "content": "rain"}]
    second = chat(sim, messages)
    assert second["message"]["tool_calls"][0]["function"]["name"] == "clock"  # type: ignore[index]
    messages += [second["message"], {"role": "tool", "tool_call_id": "x",  # type: ignore[list-item]
                                      "content": "09:00"}]
    last = chat(sim, messages)
    assert last["finish_reason"] == "stop"
    assert last["message"]["content"] == "Answer to 'Oslo weekend', from the tools: rain; 09:00"  # type: ignore[index]


def test_a_tool_without_a_schema_is_called_with_no_arguments() -> None:
    turn = agent_turn([{"role": "user", "content": "q"}], [{"name": "t"}])
    assert turn.tool_calls[0]["function"] == {"name": "t", "arguments": "{}"}
