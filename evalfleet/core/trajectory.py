"""An agent's trajectory: the ordered steps of one run, the tools it was offered, its
final answer. Pure.

A sample may carry one (``"trajectory"``), whichever producer built it: a JSONL line,
``POST /v1/samples``, the SDK, or a trace mapped from its spans. The JSON form
(``docs/producing.md``)::

    {"steps": [
        {"type": "model", "model": "m-1", "input": [{"role": "user", "content": "..."}],
         "output": [{"role": "assistant", "content": "",
                     "tool_calls": [{"id": "c1", "name": "weather",
                                     "arguments": {"city": "Oslo"}}]}]},
        {"type": "tool", "name": "weather", "call_id": "c1", "arguments": {"city": "Oslo"},
         "result": "4 C, rain", "error": null, "duration_ms": 12.5},
        {"type": "retrieval", "query": "...", "documents": ["..."]},
        {"type": "handoff", "agent": "billing"}],
     "tools": [{"name": "weather", "description": "...", "parameters": {"type": "object"}}],
     "final_answer": "Rain in Oslo."}

Arguments, results and schemas are JSON values (a tool returning text has a string
result). Sizes and counts are held to the producer's field limits
(``producers/limits.py``); nesting to the record's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolCall(_Model):
    """A tool call a model asked for, inside its output message."""

    name: str = Field(min_length=1, max_length=256)
    """The tool's name."""
    id: str | None = Field(default=None, max_length=256)
    """The call id, joining the call to its result."""
    arguments: Any = None
    """The arguments: a JSON value (a string when they were not valid JSON)."""


class Message(_Model):
    """One chat message sent to or by a model."""

    role: str = Field(min_length=1, max_length=64)
    """``system``, ``user``, ``assistant``, ``tool``..."""
    content: str = ""
    """Its text (text parts joined by newlines)."""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    """Tool calls an assistant message asks for."""
    tool_call_id: str | None = Field(default=None, max_length=256)
    """The call a ``tool`` message answers."""


class ModelStep(_Model):
    """A model call."""

    type: Literal["model"] = "model"
    model: str | None = Field(default=None, max_length=256)
    """The model that answered."""
    input: list[Message] = Field(default_factory=list)
    """Messages sent (a producer may keep only those new since the previous call)."""
    output: list[Message] = Field(default_factory=list)
    """Messages returned."""
    duration_ms: float | None = Field(default=None, ge=0)
    """How long the call took."""


class ToolStep(_Model):
    """A tool call and what it returned."""

    type: Literal["tool"] = "tool"
    name: str = Field(min_length=1, max_length=256)
    """The tool's name."""
    call_id: str | None = Field(default=None, max_length=256)
    """The call id (the model's tool call it answers)."""
    arguments: Any = None
    """The arguments: a JSON value (a string when they were not valid JSON)."""
    result: Any = None
    """What the tool returned: a JSON value, text as a string."""
    error: str | None = None
    """The error the call ended with, if any."""
    duration_ms: float | None = Field(default=None, ge=0)
    """How long the call took."""


class RetrievalStep(_Model):
    """Documents retrieved."""

    type: Literal["retrieval"] = "retrieval"
    query: str | None = None
    """What was searched for."""
    documents: list[str] = Field(default_factory=list)
    """The documents' texts, in rank order."""


class HandoffStep(_Model):
    """Control passed to another agent."""

    type: Literal["handoff"] = "handoff"
    agent: str = Field(min_length=1, max_length=256)
    """The agent that takes over."""


Step = Annotated[ModelStep | ToolStep | RetrievalStep | HandoffStep, Field(discriminator="type")]


class ToolSpec(_Model):
    """A tool the agent was offered."""

    name: str = Field(min_length=1, max_length=256)
    """The tool's name."""
    description: str | None = None
    """What it does, as the model was told."""
    parameters: Any = None
    """The JSON schema of its arguments."""


class Trajectory(_Model):
    """One agent run: its steps in order, the tools offered, the final answer."""

    steps: list[Step] = Field(default_factory=list)
    """Model calls, tool calls, retrievals and handoffs, in the order they began."""
    tools: list[ToolSpec] = Field(default_factory=list)
    """The tools offered to the agent, with their schemas."""
    final_answer: str | None = None
    """The run's answer to the user."""

    def map_text(self, change: Callable[[str], str]) -> Trajectory:
        """The trajectory with ``change`` applied to every string value in it (names,
        contents, arguments, results, schemas). Linear in its size."""
        return Trajectory.model_validate(map_strings(self.model_dump(mode="json"), change))


def text_sizes(trajectory: Trajectory) -> Iterator[tuple[str, int]]:
    """``(path, size)`` of every limited part: each message's content and tool call
    arguments, each step's arguments, result, error and documents, each tool's schema
    and description, the final answer (``trajectory.steps[4].result``)."""
    for n, step in enumerate(trajectory.steps):
        at = f"trajectory.steps[{n}]."
        if isinstance(step, ModelStep):
            for side, messages in (("input", step.input), ("output", step.output)):
                for m, message in enumerate(messages):
                    yield f"{at}{side}[{m}].content", len(message.content)
                    for c, call in enumerate(message.tool_calls):
                        yield (f"{at}{side}[{m}].tool_calls[{c}].arguments",
                               json_size(call.arguments))
        elif isinstance(step, ToolStep):
            yield f"{at}arguments", json_size(step.arguments)
            yield f"{at}result", json_size(step.result)
            yield f"{at}error", len(step.error or "")
        elif isinstance(step, RetrievalStep):
            for d, document in enumerate(step.documents):
                yield f"{at}documents[{d}]", len(document)
    for n, tool in enumerate(trajectory.tools):
        yield f"trajectory.tools[{n}].parameters", json_size(tool.parameters)
        yield f"trajectory.tools[{n}].description", len(tool.description or "")
    yield "trajectory.final_answer", len(trajectory.final_answer or "")


def step_summary(step: ModelStep | ToolStep | RetrievalStep | HandoffStep) -> str:
    """One line saying what a step did, for people: ``tool call weather {"city": "Oslo"}
    -> 4 C, rain``, ``model call (m-1) asks for weather``, ``handoff to billing``.

    The text is the sample's (hostile): whoever shows it cleans or escapes it, and cuts it.
    """
    if isinstance(step, ToolStep):
        outcome = f"error: {step.error}" if step.error else json_text(step.result)
        return f"tool call {step.name} {json_text(step.arguments)} -> {outcome}"
    if isinstance(step, ModelStep):
        model = f" ({step.model})" if step.model else ""
        calls = [call.name for message in step.output for call in message.tool_calls]
        if calls:
            return f"model call{model} asks for {', '.join(calls)}"
        said = next((m.content for m in reversed(step.output) if m.content), "")
        return f"model call{model}: {said}" if said else f"model call{model}"
    if isinstance(step, RetrievalStep):
        query = f" for {step.query!r}" if step.query else ""
        return f"retrieval{query}: {len(step.documents)} documents"
    return f"handoff to {step.agent}"


def json_text(value: Any) -> str:
    """A JSON value as one line of text (a string as itself, null as ``null``)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def json_size(value: Any) -> int:
    """Characters of a JSON value as text (a string's own length)."""
    if value is None:
        return 0
    if isinstance(value, str):
        return len(value)
    return len(json.dumps(value, ensure_ascii=False))


def map_strings(value: Any, change: Callable[[str], str]) -> Any:
    """A JSON ``value`` with every string changed, without recursion (nesting is bounded by the
    record's limits, but the walk need not rely on it)."""
    root: list[Any] = [value]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    while stack:
        holder, key = stack.pop()
        item = holder[key]
        if isinstance(item, str):
            holder[key] = change(item)
        elif isinstance(item, list):
            stack.extend((item, n) for n in range(len(item)))
        elif isinstance(item, dict):
            stack.extend((item, k) for k in item)
    return root[0]
