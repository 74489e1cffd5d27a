"""The simulator as an agent's model: tool calls when a request offers tools. Pure.

A chat request with ``tools`` (OpenAI function tools) is answered as an agent's model
would, deterministically: while some offered tool has not been called yet in the
conversation (counted by the ``tool`` messages answering calls), the reply calls the
next one in the order offered, its arguments filled from the tool's parameter schema
(string properties take the words of the last user message); once each was called, the
reply is a text answer quoting what the tools returned. So an agent framework run against
the simulator makes one call to each of its tools and then answers.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evalfleet.judgesim.schema_fill import fill_verdict


@dataclass(frozen=True, slots=True)
class ToolTurn:
    """The model's reply in an agent's conversation."""

    tool_calls: list[dict[str, Any]]
    """OpenAI ``tool_calls`` (``id``, ``type``, ``function.name`` / ``.arguments``); empty
    for the final answer."""
    content: str | None
    """The final answer's text (None with tool calls)."""

    @property
    def finish_reason(self) -> str:
        """``tool_calls`` or ``stop``."""
        return "tool_calls" if self.tool_calls else "stop"


def offered_tools(payload: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The function tools of a request (``tools: [{"type": "function", "function": ...}]``)."""
    tools = payload.get("tools")
    if not isinstance(tools, list):
        return []
    return [tool["function"] for tool in tools if isinstance(tool, dict)
            and isinstance(tool.get("function"), dict)
            and isinstance(tool["function"].get("name"), str)]


def agent_turn(messages: Sequence[Any], tools: Sequence[Mapping[str, Any]]) -> ToolTurn:
    """The model's next turn in a conversation that offers ``tools``.

    Args:
        messages: The request's messages (OpenAI chat format).
        tools: The offered function tools (``name``, ``parameters``), non-empty.

    Returns:
        A call to the next tool not yet called, or the final answer.
    """
    results = [m for m in messages if isinstance(m, dict) and m.get("role") == "tool"]
    question = _last_user_text(messages)
    if len(results) < len(tools):
        tool = tools[len(results)]
        digest = hashlib.sha256(f"{question}\x00{tool['name']}".encode(
            "utf-8", "surrogatepass")).digest()
        arguments = _arguments(tool.get("parameters"), question, digest)
        call_id = f"call_{digest.hex()[:12]}_{len(results)}"
        return ToolTurn([{"id": call_id, "type": "function",
                          "function": {"name": tool["name"],
                                       "arguments": json.dumps(arguments)}}], None)
    quoted = "; ".join(_text(m.get("content")) for m in results)
    return ToolTurn([], f"Answer to {question!r}, from the tools: {quoted}")


def _arguments(schema: Any, question: str, digest: bytes) -> dict[str, Any]:
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return {}
    strings = {name: question for name, spec in schema["properties"].items()
               if isinstance(spec, dict) and spec.get("type") == "string" and "enum" not in spec}
    filled, _ = fill_verdict(schema, _slots(digest))
    return {**filled, **strings}


def _slots(digest: bytes) -> Iterator[int]:
    n = 0
    while True:
        block = hashlib.sha256(digest + n.to_bytes(4, "big")).digest()
        for index in range(0, len(block), 2):
            yield int.from_bytes(block[index:index + 2], "big")
        n += 1


def _last_user_text(messages: Sequence[Any]) -> str:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            text = _text(message.get("content"))
            if text:
                return text
    return ""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content
                       if isinstance(part, dict) and isinstance(part.get("text"), str))
    return ""
