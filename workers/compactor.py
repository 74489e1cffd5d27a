"""A trajectory written for the judge, compacted into a character budget. Pure and
deterministic: the same trajectory and budget give the same text, so the verdict key's
prompt and the judge's prompt cache stay stable.

The text is a list of pieces. Kept whole: each step's header, the first user message,
the final answer (the last model call's output), and every tool call's name and
arguments. Cut when the whole does not fit: tool results, errors, retrieved documents and
every other message, each to the same cap, found by bisection as the largest that fits;
a piece over the cap keeps its head and tail and says in the middle what was cut:
``[... 18,204 of 20,000 characters of this tool result cut ...]``. A trajectory whose kept
pieces alone pass the budget cannot be compacted (:class:`TrajectoryTooLong`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evalfleet.core.errors import InvalidSample
from evalfleet.core.session import Session
from evalfleet.core.trajectory import (
    HandoffStep,
    Message,
    ModelStep,
    RetrievalStep,
    ToolSpec,
    ToolStep,
    Trajectory,
)


class TrajectoryTooLong(InvalidSample):
    """A trajectory whose kept parts alone pass the metric's budget."""


class SessionTooLong(TrajectoryTooLong):
    """A session whose kept parts alone pass the metric's budget."""


@dataclass(frozen=True, slots=True)
class Compaction:
    """What compaction cut from a trajectory's text."""

    original_chars: int
    """Characters of the whole text."""
    cut_chars: int
    """Characters cut."""
    pieces_cut: int
    """Parts cut (tool results, messages, documents)."""

    def as_json(self) -> dict[str, int]:
        """The record kept with the verdict."""
        return {"original_chars": self.original_chars, "cut_chars": self.cut_chars,
                "pieces_cut": self.pieces_cut}


@dataclass(frozen=True, slots=True)
class _Piece:
    text: str
    """The text; of a cuttable piece, the part that may be cut."""
    label: str | None
    """What the piece is (``tool result``); None for a piece always kept whole."""
    lead: str = ""
    """Written before the text, never cut (``  result: ``)."""

    @property
    def whole(self) -> str:
        return f"{self.lead}{self.text}\n" if self.label is not None else self.text


def render_trajectory(trajectory: Trajectory, *,
                      budget_chars: int) -> tuple[str, Compaction | None]:
    """The trajectory's steps as text within ``budget_chars``.

    Returns:
        The text, and what was cut (None when it fit whole).

    Raises:
        TrajectoryTooLong: When the parts always kept pass the budget.
    """
    return _fit(_pieces(trajectory), budget_chars=budget_chars, too_long=_trajectory_too_long)


def render_session(session: Session, *, budget_chars: int) -> tuple[str, Compaction | None]:
    """A conversation's turns as text within ``budget_chars``, turn by turn: each turn's
    user message, the documents it retrieved, its tool calls with their results, and
    its answer.

    Kept whole: each turn's header, every user message (a repeated question is what a
    judge of frustration looks for), every tool call's name and arguments, and the last
    turn's answer. Cut like a trajectory's parts: documents, tool results and earlier
    answers. A turn's model calls are not written: their messages repeat the
    conversation, which the turns already show.

    Returns:
        The text, and what was cut (None when it fit whole).

    Raises:
        SessionTooLong: When the parts always kept pass the budget.
    """
    return _fit(_session_pieces(session), budget_chars=budget_chars,
                too_long=_session_too_long)


def _fit(pieces: list[_Piece], *, budget_chars: int,
         too_long: Callable[[int, int], InvalidSample]) -> tuple[str, Compaction | None]:
    """``pieces`` as text within ``budget_chars``, every cuttable piece cut to one cap."""
    whole = _size(pieces, None)
    if whole <= budget_chars:
        return "".join(p.whole for p in pieces), None
    dropped = 0
    if _size(pieces, 0) > budget_chars:
        # Even a marker per cut part is too much: drop parts whole, from the middle out.
        pieces, dropped = _drop_middle(pieces, budget_chars=budget_chars, too_long=too_long)
    low, high = 0, max(len(p.text) for p in pieces)
    while low < high:  # the largest cap that fits
        middle = (low + high + 1) // 2
        if _size(pieces, middle) <= budget_chars:
            low = middle
        else:
            high = middle - 1
    texts = [_cut(p, low) for p in pieces]
    text = "".join(texts)
    cut = dropped + sum(1 for p in pieces if p.label is not None and len(p.text) > low)
    return text, Compaction(original_chars=whole, cut_chars=whole - len(text), pieces_cut=cut)


def _trajectory_too_long(budget_chars: int, kept: int) -> InvalidSample:
    return TrajectoryTooLong(
        f"the trajectory cannot be compacted into the metric's budget of {budget_chars:,} "
        f"characters: its tool calls, first question and final answer alone take "
        f"{kept:,}", field="trajectory")


def _session_too_long(budget_chars: int, kept: int) -> InvalidSample:
    return SessionTooLong(
        f"the session cannot be compacted into the metric's budget of {budget_chars:,} "
        f"characters: its user messages, tool calls and last answer alone take {kept:,}",
        field="session")


def _drop_middle(pieces: list[_Piece], *, budget_chars: int,
                 too_long: Callable[[int, int], InvalidSample]) -> tuple[list[_Piece], int]:
    """``pieces`` with the cuttable ones nearest the middle replaced by one marker,
    as few as make the rest fit with a marker each.

    Raises:
        InvalidSample: ``too_long``'s error, when the kept parts alone pass the budget.
    """
    cuttable = [n for n, p in enumerate(pieces) if p.label is not None]
    middle = len(pieces) / 2
    order = sorted(cuttable, key=lambda n: (abs(n - middle), n))
    size = _size(pieces, 0)
    dropped: set[int] = set()
    chars = 0
    for n in order:
        if size + len(_dropped_marker(len(dropped), chars)) <= budget_chars and dropped:
            break
        dropped.add(n)
        chars += len(pieces[n].text)  # the cuttable part; its lead goes with it
        size -= len(_cut(pieces[n], 0))
    marker = _dropped_marker(len(dropped), chars)
    if size + len(marker) > budget_chars or not dropped:
        raise too_long(budget_chars, sum(len(p.text) for p in pieces if p.label is None))
    first = min(dropped)
    return [_Piece(marker, None) if n == first else piece
            for n, piece in enumerate(pieces) if n == first or n not in dropped], len(dropped)


def _dropped_marker(parts: int, chars: int) -> str:
    return (f"  [... {parts:,} parts from the middle cut whole ({chars:,} "
            "characters of tool results, messages, answers and documents); the calls and "
            "user messages are kept ...]\n")


def render_tools(tools: list[ToolSpec]) -> str:
    """The offered tools, one per line with its description and JSON schema."""
    lines = []
    for tool in tools:
        line = f"- {tool.name}" + (f": {tool.description}" if tool.description else "")
        if tool.parameters is not None:
            line += f"\n  parameters: {_json(tool.parameters)}"
        lines.append(line)
    return "\n".join(lines) if lines else "(no tools were offered)"


def _size(pieces: list[_Piece], cap: int | None) -> int:
    """The length of the text cut to ``cap`` (None: whole), without building it."""
    total = 0
    for piece in pieces:
        length = len(piece.text)
        if piece.label is None:
            total += length
        elif cap is None or length <= cap:
            total += len(piece.lead) + length + 1
        else:
            total += len(piece.lead) + cap + len(_marker(piece, cap)) + 1
    return total


def _cut(piece: _Piece, cap: int) -> str:
    text = piece.text
    if piece.label is None or len(text) <= cap:
        return piece.whole
    head = text[:(cap + 1) // 2]
    tail = text[len(text) - cap // 2:] if cap // 2 else ""
    return f"{piece.lead}{head}{_marker(piece, cap)}{tail}\n"


def _marker(piece: _Piece, cap: int) -> str:
    length = len(piece.text)
    return f"[... {length - cap:,} of {length:,} characters of this {piece.label} cut ...]"


def _pieces(trajectory: Trajectory) -> list[_Piece]:
    pieces: list[_Piece] = []
    first_user = True
    last_model = max((n for n, s in enumerate(trajectory.steps) if isinstance(s, ModelStep)),
                     default=-1)
    for n, step in enumerate(trajectory.steps, 1):
        if isinstance(step, ModelStep):
            pieces.append(_Piece(f"Step {n}: model call{_model_of(step)}{_took(step)}\n", None))
            for message in step.input:
                keep = first_user and message.role == "user" and bool(message.content)
                first_user = first_user and not keep
                pieces.extend(_message(message, keep=keep))
            for message in step.output:
                pieces.extend(_message(message, keep=n - 1 == last_model))
        elif isinstance(step, ToolStep):
            call = f" (call {step.call_id})" if step.call_id else ""
            pieces.extend(_tool(step, f"Step {n}: tool call {step.name}{call}{_took(step)}\n"
                                      f"  arguments: {_json(step.arguments)}\n", indent="  "))
        elif isinstance(step, RetrievalStep):
            query = f" for {step.query!r}" if step.query else ""
            pieces.append(_Piece(f"Step {n}: retrieval{query}, "
                                 f"{len(step.documents)} documents\n", None))
            pieces.extend(_Piece(document, "document", f"  [{d}] ")
                          for d, document in enumerate(step.documents, 1))
        elif isinstance(step, HandoffStep):
            pieces.append(_Piece(f"Step {n}: handoff to agent {step.agent}\n", None))
    return pieces


def _tool(step: ToolStep, header: str, *, indent: str) -> list[_Piece]:
    """A tool call: its header (kept), its result and error (cut)."""
    pieces = [_Piece(header, None), _Piece(_json(step.result), "tool result",
                                           f"{indent}result: ")]
    if step.error:
        pieces.append(_Piece(step.error, "tool error", f"{indent}error: "))
    return pieces


def _message(message: Message, *, keep: bool) -> list[_Piece]:
    pieces = []
    if message.content:
        answers = f" (answering call {message.tool_call_id})" if message.tool_call_id else ""
        lead = f"  [{message.role}{answers}] "
        pieces.append(_Piece(f"{lead}{message.content}\n", None) if keep else
                      _Piece(message.content, "message", lead))
    pieces.extend(_Piece(f"  [{message.role}] asks for tool {call.name}"
                         f"{f' (call {call.id})' if call.id else ''} with arguments "
                         f"{_json(call.arguments)}\n", None)
                  for call in message.tool_calls)
    return pieces


def _model_of(step: ModelStep) -> str:
    return f" ({step.model})" if step.model else ""


def _took(step: ModelStep | ToolStep) -> str:
    return f", {step.duration_ms:,.0f} ms" if step.duration_ms is not None else ""


def _json(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _session_pieces(session: Session) -> list[_Piece]:
    pieces: list[_Piece] = []
    last = len(session.turns)
    for n, turn in enumerate(session.turns, 1):
        when = f", {turn.timestamp.isoformat()}" if turn.timestamp else ""
        pieces.append(_Piece(f"Turn {n} of {last} (trace {turn.trace_id}{when})\n", None))
        pieces.append(_Piece(f"  [user] {turn.input}\n", None))
        pieces.extend(_Piece(document, "document", f"  retrieved [{d}] ")
                      for d, document in enumerate(turn.context, 1))
        for step in turn.trajectory.steps if turn.trajectory else ():
            if isinstance(step, ToolStep):
                pieces.extend(_tool(step, f"  tool call {step.name} with arguments "
                                          f"{_json(step.arguments)}\n", indent="    "))
            elif isinstance(step, HandoffStep):
                pieces.append(_Piece(f"  handoff to agent {step.agent}\n", None))
        answer = _Piece(turn.output, "answer", "  [assistant] ")
        pieces.append(_Piece(answer.whole, None) if n == last else answer)
    return pieces
