"""A conversation (a session's version) as one chat fine-tuning line. Pure.

Each turn adds the user's message, then, when the turn ran tools, the assistant's tool
calls and their results as :func:`evalfleet.dataset.conversation.chat_conversation`
writes an agent's run, then the turn's answer. Only the turn's tool steps are read from
its trajectory: a model call's input carries the history of earlier turns again, which
the conversation already holds. A turn whose tool calls cannot be written (a call with
no result) keeps its question and answer. ``tools`` lists every tool offered in any
turn, once by name.
"""

from __future__ import annotations

from typing import Any

from evalfleet.core.session import Session, Turn
from evalfleet.core.trajectory import ToolStep
from evalfleet.dataset.conversation import Unconvertible, chat_conversation


def session_chat(session: Session) -> dict[str, Any]:
    """The conversation as ``{"messages": [...], "tools": [...]}`` (``tools`` left out
    when no turn offered any).

    Raises:
        Unconvertible: The session has no turn with both a question and an answer.
    """
    messages: list[dict[str, Any]] = []
    tools: dict[str, dict[str, Any]] = {}
    for turn in session.turns:
        if not turn.input or not turn.output:
            continue
        turn_messages, turn_tools = _turn_chat(turn)
        messages += turn_messages
        for tool in turn_tools:
            tools.setdefault(tool["function"]["name"], tool)
    if not messages:
        raise Unconvertible("no turn has both a question and an answer")
    record: dict[str, Any] = {"messages": messages}
    if tools:
        record["tools"] = list(tools.values())
    return record


def _turn_chat(turn: Turn) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    plain = [{"role": "user", "content": turn.input},
             {"role": "assistant", "content": turn.output}]
    trajectory = turn.trajectory
    if trajectory is None or not any(isinstance(s, ToolStep) for s in trajectory.steps):
        return plain, []
    tool_steps = [step for step in trajectory.steps if isinstance(step, ToolStep)]
    only_tools = trajectory.model_copy(update={"steps": tool_steps,
                                               "final_answer": turn.output})
    try:
        record = chat_conversation(only_tools, question=turn.input)
    except Unconvertible:
        return plain, []
    return record["messages"], record.get("tools", [])
