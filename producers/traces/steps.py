"""From one trace's spans to an agent trajectory. Pure.

Each span is read in the first convention it matches (the table "From spans to steps" in
``docs/traces.md``): OTel GenAI (``gen_ai.operation.name``: ``execute_tool``,
``invoke_agent``, model calls), OpenInference (``openinference.span.kind``: TOOL, AGENT,
LLM, RETRIEVER), Traceloop (``traceloop.span.kind``: tool, agent; its LLM spans'
``gen_ai.prompt.N.*``). A trace gets a trajectory only when it has a tool or an agent: a
tool span, a model's tool call, or an agent span; any other trace maps as a single call.

Model calls keep the messages new since the previous call (a model call's input repeats
the whole conversation, which would make a trajectory quadratic in its length): the
first call's whole input, then each later call's messages after its last assistant
message (the tool results and a new user turn). When a trace has no tool span, each
model's tool call becomes a tool step, its result read from the tool message that
answers it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from evalfleet.core import jsontext
from evalfleet.core.trajectory import (
    HandoffStep,
    Message,
    ModelStep,
    RetrievalStep,
    ToolCall,
    ToolSpec,
    ToolStep,
    Trajectory,
)
from producers.traces.span import Span
from producers.traces.values import as_list as _as_list
from producers.traces.values import indexed
from producers.traces.values import text as _text

#: ``message.tool_calls.N.tool_call.<part>`` inside one OpenInference message.
_OI_TOOL_CALL = re.compile(r"message\.tool_calls\.(\d{1,6})\.tool_call\.(.+)")

#: ``llm.tools.N.tool.json_schema`` (OpenInference's offered tools).
_OI_TOOL = re.compile(r"llm\.tools\.(\d{1,6})\.tool\.json_schema")

#: Flattened message lists read (``prefix.N.rest``).
_MESSAGE_LISTS = ("llm.input_messages", "llm.output_messages", "gen_ai.prompt",
                  "gen_ai.completion")

#: GenAI operations that are model calls.
_MODEL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})

Step = ModelStep | ToolStep | RetrievalStep | HandoffStep

#: Deepest nesting of an argument, result or schema kept as JSON: a step's arguments sit
#: at level 9 of a sample record (inside a message's tool call), and the record may
#: nest 16 levels by default (``EVALFLEET_SAMPLE_MAX_DEPTH``).
MAX_VALUE_DEPTH = 6


def build_trajectory(spans: Sequence[Span], *, final_answer: str | None,
                     documents: Sequence[Sequence[str] | None]) -> Trajectory | None:
    """The trajectory of a trace, or None for a trace with no tool or agent.

    Args:
        spans: The trace's spans in start order.
        final_answer: The answer the trace's sample carries.
        documents: Each span's retrieved documents (None for a span that retrieved
            nothing), as the sample's mapping read them.
    """
    if not any(has_agent_marks(span.attributes) for span in spans):
        return None
    steps: list[Step] = []
    tools: dict[str, ToolSpec] = {}
    agentic = False
    agent: str | None = None
    model_seen = False
    for span, retrieved in zip(spans, documents, strict=True):
        attributes = span.attributes
        read = _read(attributes, tools, later=model_seen)
        model_seen = model_seen or isinstance(read, ModelStep)
        if isinstance(read, str):  # an agent span
            agentic = True
            if agent is not None and read != agent:
                steps.append(HandoffStep(agent=read))
            agent = read
        elif read is not None:
            agentic = agentic or isinstance(read, ToolStep)
            if not isinstance(read, RetrievalStep | HandoffStep) and span.end_ns > span.start_ns:
                read = read.model_copy(update={"duration_ms": (span.end_ns - span.start_ns) / 1e6})
            steps.append(read)
        elif retrieved:
            steps.append(RetrievalStep(query=None, documents=list(retrieved)))
    if not any(isinstance(s, ToolStep) for s in steps):
        steps = _tool_steps_from_messages(steps)
        agentic = agentic or any(isinstance(s, ToolStep) for s in steps)
    if not agentic:
        return None
    return Trajectory(steps=steps, tools=list(tools.values()), final_answer=final_answer)


def first_agent(spans: Sequence[Span]) -> str | None:
    """The name of the trace's first agent (``gen_ai.agent.name`` of ``invoke_agent``,
    ``agent.name`` of an OpenInference ``AGENT``, a Traceloop ``agent``'s entity name)."""
    for span in spans:
        attributes = span.attributes
        if attributes.get("gen_ai.operation.name") == "invoke_agent":
            name = _text(attributes.get("gen_ai.agent.name"))
        elif str(attributes.get("openinference.span.kind", "")).upper() == "AGENT":
            name = _text(attributes.get("agent.name"))
        elif attributes.get("traceloop.span.kind") == "agent":
            name = _text(attributes.get("traceloop.entity.name"))
        else:
            continue
        if name:
            return name
    return None


def has_agent_marks(attributes: Mapping[str, Any]) -> bool:
    """A cheap test, before any message is decoded: a tool or agent span, offered tools,
    or a tool call in a model's output."""
    if (attributes.get("gen_ai.operation.name") in ("execute_tool", "invoke_agent")
            or str(attributes.get("openinference.span.kind", "")).upper() in ("TOOL", "AGENT")
            or attributes.get("traceloop.span.kind") in ("tool", "agent")
            or "gen_ai.tool.name" in attributes or "gen_ai.tool.definitions" in attributes):
        return True
    output = attributes.get("gen_ai.output.messages")
    if isinstance(output, str) and '"tool_call"' in output:
        return True
    return any(".tool_calls." in key for key in attributes if key.startswith("llm.output"))


def _read(attributes: Mapping[str, Any], tools: dict[str, ToolSpec], *,
          later: bool) -> Step | str | None:
    """A span's step, its agent's name (a str), or None; ``later`` for a span after the
    trace's first model call (whose input is cut to what is new)."""
    if "openinference.span.kind" in attributes:
        return _openinference(attributes, tools, later=later)
    if "gen_ai.operation.name" in attributes or "gen_ai.input.messages" in attributes:
        return _genai(attributes, tools, later=later)
    if "traceloop.span.kind" in attributes or any(k.startswith("gen_ai.prompt.")
                                                  for k in attributes):
        return _traceloop(attributes, later=later)
    return None


def _genai(attributes: Mapping[str, Any], tools: dict[str, ToolSpec], *,
           later: bool) -> Step | str | None:
    operation = _text(attributes.get("gen_ai.operation.name")) or ""
    if operation == "execute_tool" or "gen_ai.tool.call.id" in attributes:
        name = _text(attributes.get("gen_ai.tool.name"))
        if name is None:
            return None
        return ToolStep(name=name, call_id=_text(attributes.get("gen_ai.tool.call.id")),
                        arguments=_value(attributes.get("gen_ai.tool.call.arguments")),
                        result=_value(attributes.get("gen_ai.tool.call.result")),
                        error=_text(attributes.get("error.type")))
    if operation in ("invoke_agent", "create_agent"):
        return _text(attributes.get("gen_ai.agent.name")) or None
    for definition in _as_list(_decoded(attributes.get("gen_ai.tool.definitions"))):
        _offer(tools, definition)
    if operation not in _MODEL_OPERATIONS and "gen_ai.output.messages" not in attributes:
        return None
    return ModelStep(
        model=_text(attributes.get("gen_ai.response.model")
                    or attributes.get("gen_ai.request.model")),
        input=_genai_messages(_new(_as_list(_decoded(attributes.get("gen_ai.input.messages"))),
                                   role="role", later=later)),
        output=_genai_messages(_decoded(attributes.get("gen_ai.output.messages"))))


def _genai_messages(raw: Any) -> list[Message]:
    """GenAI messages (``{role, parts}``): text parts joined, tool calls kept, and each
    tool call response as a ``tool`` message of its own."""
    messages: list[Message] = []
    for item in _as_list(raw):
        if not isinstance(item, dict) or not _text(item.get("role")):
            continue
        texts, calls = [], []
        for part in _as_list(item.get("parts")):
            if not isinstance(part, dict):
                continue
            kind = part.get("type")
            if kind == "tool_call" and _text(part.get("name")):
                calls.append(ToolCall(name=part["name"], id=_id(part.get("id")),
                                      arguments=_value(part.get("arguments"))))
            elif kind == "tool_call_response":
                # The value is under "response" in the conventions' schema and "result" in
                # some releases' instrumentations.
                result = part.get("response", part.get("result"))
                messages.append(Message(role="tool", content=_as_text(_value(result)),
                                        tool_call_id=_id(part.get("id"))))
            elif isinstance(part.get("content"), str):
                texts.append(part["content"])
        if texts or calls or not messages:
            messages.append(Message(role=item["role"], content="\n".join(texts),
                                    tool_calls=calls))
    return messages


def _openinference(attributes: Mapping[str, Any], tools: dict[str, ToolSpec], *,
                   later: bool) -> Step | str | None:
    kind = str(attributes["openinference.span.kind"]).upper()
    if kind == "TOOL":
        name = _text(attributes.get("tool.name"))
        if name is None:
            return None
        if "tool.parameters" in attributes:
            _offer(tools, {"name": name, "description": attributes.get("tool.description"),
                           "parameters": _value(attributes.get("tool.parameters"))})
        return ToolStep(name=name, call_id=_text(attributes.get("tool_call.id")
                                                 or attributes.get("tool.id")),
                        arguments=_value(attributes.get("input.value")),
                        result=_value(attributes.get("output.value")),
                        error=_text(attributes.get("exception.message")))
    if kind == "AGENT":
        return _text(attributes.get("agent.name")) or None
    if kind != "LLM":
        return None
    for key, value in attributes.items():
        if _OI_TOOL.fullmatch(key):
            _offer(tools, _decoded(value))
    lists = indexed(attributes, _MESSAGE_LISTS)
    return ModelStep(model=_text(attributes.get("llm.model_name")),
                     input=[_oi_message(m) for m in _new(lists["llm.input_messages"],
                                                         role="message.role", later=later)],
                     output=[_oi_message(m) for m in lists["llm.output_messages"]])


def _oi_message(flat: Mapping[str, Any]) -> Message:
    """One ``llm.*_messages.N.*`` message (its keys after the index)."""
    calls: dict[int, dict[str, Any]] = {}
    for key, value in flat.items():
        match = _OI_TOOL_CALL.fullmatch(key)
        if match is not None:
            calls.setdefault(int(match.group(1)), {})[match.group(2)] = value
    tool_calls = [ToolCall(name=call["function.name"], id=_id(call.get("id")),
                           arguments=_value(call.get("function.arguments")))
                  for _, call in sorted(calls.items()) if _text(call.get("function.name"))]
    return Message(role=_text(flat.get("message.role")) or "unknown",
                   content=_as_text(flat.get("message.content")), tool_calls=tool_calls,
                   tool_call_id=_id(flat.get("message.tool_call_id")))


def _traceloop(attributes: Mapping[str, Any], *, later: bool) -> Step | str | None:
    kind = _text(attributes.get("traceloop.span.kind"))
    name = _text(attributes.get("traceloop.entity.name"))
    if kind == "tool" and name:
        return ToolStep(name=name, arguments=_entity_arguments(
                            _value(attributes.get("traceloop.entity.input"))),
                        result=_value(attributes.get("traceloop.entity.output")))
    if kind == "agent" and name:
        return name
    lists = indexed(attributes, _MESSAGE_LISTS)
    if not lists["gen_ai.prompt"] and not lists["gen_ai.completion"]:
        return None
    return ModelStep(
        model=_text(attributes.get("gen_ai.response.model")
                    or attributes.get("gen_ai.request.model")),
        input=[_plain_message(m) for m in _new(lists["gen_ai.prompt"], role="role",
                                               later=later)],
        output=[_plain_message(m) for m in lists["gen_ai.completion"]])


def _plain_message(flat: Mapping[str, Any]) -> Message:
    return Message(role=_text(flat.get("role")) or "unknown", content=_as_text(flat.get("content")))


def _entity_arguments(value: Any) -> Any:
    """traceloop-sdk records a call as ``{"args": [...], "kwargs": {...}}``: the keyword
    arguments when there are no positional ones."""
    if (isinstance(value, dict) and set(value) <= {"args", "kwargs"}
            and not value.get("args") and isinstance(value.get("kwargs"), dict)):
        return value["kwargs"]
    return value


def _offer(tools: dict[str, ToolSpec], definition: Any) -> None:
    """Keep an offered tool (first definition of a name wins): ``{name, description,
    parameters}``, or OpenAI's ``{"type": "function", "function": {...}}``."""
    if isinstance(definition, dict) and isinstance(definition.get("function"), dict):
        definition = definition["function"]
    if not isinstance(definition, dict):
        return
    name = _text(definition.get("name"))
    if name is None or name in tools:
        return
    tools[name] = ToolSpec(name=name, description=_text(definition.get("description")),
                           parameters=_value(definition.get("parameters")
                                             or definition.get("parameters_json_schema")))


def _tool_steps_from_messages(steps: list[Step]) -> list[Step]:
    """Each model tool call as a tool step after its model step, its result from the
    ``tool`` message answering it (by call id) in a later model step's input."""
    results = {m.tool_call_id: m.content for s in steps if isinstance(s, ModelStep)
               for m in s.input if m.role == "tool" and m.tool_call_id}
    out: list[Step] = []
    for step in steps:
        out.append(step)
        if isinstance(step, ModelStep):
            out.extend(ToolStep(name=call.name, call_id=call.id, arguments=call.arguments,
                                result=results.get(call.id) if call.id else None)
                       for message in step.output for call in message.tool_calls)
    return out


def _new(messages: list[Any], *, role: str, later: bool) -> list[Any]:
    """A later model call's input after its last assistant message (see the module
    docstring), cut before any message is built; the first call's whole."""
    if not later:
        return messages
    last = max((n for n, m in enumerate(messages)
                if isinstance(m, dict) and m.get(role) == "assistant"), default=-1)
    return messages[last + 1:]


def _value(raw: Any) -> Any:
    """An argument, result or schema: JSON text decoded, as long as it nests at most
    :data:`MAX_VALUE_DEPTH` levels (deeper, it stays text, which a judge reads as well,
    so the sample stays within the record's nesting limit); other text as it is."""
    value = _decoded(raw, max_depth=MAX_VALUE_DEPTH)
    if value is not raw or isinstance(raw, str):
        return value
    return raw if _depth(raw) <= MAX_VALUE_DEPTH else json.dumps(raw, ensure_ascii=False)


def _decoded(raw: Any, *, max_depth: int = jsontext.HARD_MAX_DEPTH) -> Any:
    """JSON text decoded (text that is not JSON, or nests deeper, as it is)."""
    if not isinstance(raw, str):
        return raw
    if not raw.lstrip().startswith(("[", "{", '"')):
        return raw
    try:
        return jsontext.loads_strict(raw, max_depth=max_depth)
    except ValueError:
        return raw


def _depth(value: Any) -> int:
    """Levels of arrays and objects in a structured value (an OTLP array or map)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in
                         (item.values() if isinstance(item, dict) else item))
    return deepest


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _id(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None



