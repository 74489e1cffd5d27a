"""An agent's run as one chat fine-tuning conversation, tool calls included. Pure.

OpenAI's chat fine-tuning format for tool use is a line of ``messages`` (system, user,
assistant messages with ``tool_calls``, ``tool`` messages answering them by
``tool_call_id``) and the ``tools`` offered (``{"type": "function", "function": {name,
description, parameters}}``). A trajectory holds the same run in steps: model calls with
the messages new since the previous call (or, from some producers, the whole
conversation again), and tool calls with their results. The conversation is rebuilt in
step order:

- each model call adds its input messages not yet in the conversation (a repeated
  conversation is recognised as a prefix and skipped) and then its output;
- a model's tool call is answered by the tool message that answers it in the next call's
  input, or else by the tool step with its call id (or the next one of its name), placed
  right after the assistant's message;
- a tool step no model asked for (a producer that saw only the tools) becomes an
  assistant tool call and its answer;
- calls without an id get ``call_<n>``; the final answer ends the conversation when the
  last model call did not say it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from evalfleet.core.trajectory import Message, ModelStep, ToolStep, Trajectory, json_text

#: Roles kept as they are; ``developer`` is written as ``system``, other roles are left out.
_ROLES = {"system": "system", "developer": "system", "user": "user",
          "assistant": "assistant", "tool": "tool"}


class Unconvertible(ValueError):
    """A run that cannot be written as a conversation (the reason is the message)."""


@dataclass
class _Call:
    id: str
    name: str
    answered: bool = False


@dataclass
class _Builder:
    trajectory: Trajectory
    messages: list[dict[str, Any]] = field(default_factory=list)
    from_models: list[Message] = field(default_factory=list)
    """The messages taken from model calls, to recognise a repeated conversation."""
    open_calls: list[_Call] = field(default_factory=list)
    used_tools: set[int] = field(default_factory=set)
    """Tool steps (by index) already written as answers."""
    next_id: int = 1

    def model(self, step: ModelStep) -> None:
        new = step.input
        if self.from_models and step.input[:len(self.from_models)] == self.from_models:
            new = step.input[len(self.from_models):]
        answered = {m.tool_call_id for m in new if m.role == "tool" and m.tool_call_id}
        self.answer_open(skip=answered)
        for message in new:
            self.add(message)
        for message in step.output:
            self.add(message)
        self.from_models += [*new, *step.output]

    def add(self, message: Message) -> None:
        role = _ROLES.get(message.role)
        if role is None:
            return
        if role == "tool":
            call = self.pending(message.tool_call_id)
            if call is None:
                return  # answers nothing asked in this conversation
            call.answered = True
            self.messages.append({"role": "tool", "tool_call_id": call.id,
                                  "content": message.content})
            return
        line: dict[str, Any] = {"role": role, "content": message.content}
        if role == "assistant" and message.tool_calls:
            calls = [self.ask(call.id, call.name) for call in message.tool_calls]
            line["content"] = message.content or None
            line["tool_calls"] = [_function_call(call.id, call.name, tool.arguments)
                                  for call, tool in zip(calls, message.tool_calls, strict=True)]
        self.messages.append(line)

    def tool(self, index: int, step: ToolStep) -> None:
        if self.match(step) is not None:
            return  # the model asked for it: answered in its place
        self.answer_open(skip=set())
        call = self.ask(step.call_id, step.name)
        self.messages.append({"role": "assistant", "content": None,
                              "tool_calls": [_function_call(call.id, call.name,
                                                            step.arguments)]})
        self.used_tools.add(index)
        self.write_answer(call, step)

    def ask(self, call_id: str | None, name: str) -> _Call:
        if not call_id:
            call_id = f"call_{self.next_id}"
            self.next_id += 1
        call = _Call(call_id, name)
        self.open_calls.append(call)
        return call

    def pending(self, call_id: str | None) -> _Call | None:
        """The open call a tool message answers (without an id: the first open one)."""
        return next((c for c in self.open_calls if not c.answered and
                     (call_id is None or c.id == call_id)), None)

    def match(self, step: ToolStep) -> _Call | None:
        """The open call a tool step answers: by call id, else the first of its name."""
        return next((c for c in self.open_calls if not c.answered and (
            c.id == step.call_id if step.call_id else c.name == step.name)), None)

    def answer_open(self, *, skip: set[str]) -> None:
        """Answer every open call not answered by a coming tool message, from its step."""
        for call in self.open_calls:
            if call.answered or call.id in skip:
                continue
            found = self.tool_step_for(call)
            if found is None:
                raise Unconvertible(f"tool call {call.name!r} ({call.id}) has no result in "
                                    "the trajectory")
            self.used_tools.add(found[0])
            self.write_answer(call, found[1])
        self.open_calls = [c for c in self.open_calls if not c.answered]

    def tool_step_for(self, call: _Call) -> tuple[int, ToolStep] | None:
        """The unused tool step that answers ``call``: its call id, else the first of its
        name that has no id."""
        candidates = [(n, s) for n, s in enumerate(self.trajectory.steps)
                      if isinstance(s, ToolStep) and n not in self.used_tools]
        by_id = [c for c in candidates if c[1].call_id == call.id]
        by_name = [c for c in candidates if c[1].name == call.name and not c[1].call_id]
        found = by_id or by_name
        return found[0] if found else None

    def write_answer(self, call: _Call, step: ToolStep) -> None:
        call.answered = True
        content = f"error: {step.error}" if step.error else json_text(step.result)
        self.messages.append({"role": "tool", "tool_call_id": call.id, "content": content})


def chat_conversation(trajectory: Trajectory, *,
                      question: str | None) -> dict[str, Any]:
    """The run as ``{"messages": [...], "tools": [...]}`` in OpenAI's chat fine-tuning
    format (``tools`` left out when none were offered).

    Args:
        trajectory: The run.
        question: The sample's input, asked first when no model call shows a user message.

    Raises:
        Unconvertible: A tool call with no result anywhere in the run, or a run that ends
            without an answer from the assistant.
    """
    builder = _Builder(trajectory)
    for n, step in enumerate(trajectory.steps):
        if isinstance(step, ModelStep):
            builder.model(step)
        elif isinstance(step, ToolStep) and n not in builder.used_tools:
            builder.tool(n, step)
    builder.answer_open(skip=set())
    messages = builder.messages
    if not any(m["role"] == "user" for m in messages) and question:
        systems = sum(1 for m in messages if m["role"] == "system")
        messages.insert(systems, {"role": "user", "content": question})
    last = messages[-1] if messages else {}
    if trajectory.final_answer and not (last.get("role") == "assistant"
                                        and last.get("content") == trajectory.final_answer):
        messages.append({"role": "assistant", "content": trajectory.final_answer})
    if not messages or messages[-1]["role"] != "assistant":
        raise Unconvertible("the run ends without an answer from the assistant")
    record: dict[str, Any] = {"messages": messages}
    if trajectory.tools:
        record["tools"] = [{"type": "function", "function": {
            "name": tool.name, **({"description": tool.description} if tool.description else {}),
            "parameters": tool.parameters if isinstance(tool.parameters, dict)
            else {"type": "object", "properties": {}}}} for tool in trajectory.tools]
    return record


def _function_call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    """An assistant's tool call; its arguments as JSON text, as the format wants them."""
    text = arguments if isinstance(arguments, str) else json.dumps(
        {} if arguments is None else arguments, ensure_ascii=False)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}
