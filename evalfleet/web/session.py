"""A conversation as the pages show it: its turns in order, the judged turn marked.

The review page and the verdict page show a session-unit sample (``evalfleet.core.session``)
turn by turn: each turn's question, answer, the documents retrieved in it and its
agent steps (one line each, opened on demand, as :mod:`evalfleet.web.trajectory` shows a
trace). A version of a session is judged when its last turn closes it, so that turn is
marked and open; the earlier ones are closed, one line each (their question). Pure: the
template escapes every text (sample text is hostile); here it is only bounded, so a
conversation of a thousand turns stays a page a browser opens at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from evalfleet.alerts.evidence import plain_text
from evalfleet.core.session import Session
from evalfleet.web.trajectory import (
    SUMMARY_CHARS,
    TrajectoryView,
    cut,
    trajectory_view,
    unreadable,
)

#: Turns shown on a page (the last ones: the judged turn is the last); the rest are counted.
MAX_TURNS = 200


@dataclass(frozen=True)
class TurnView:
    """One turn of a conversation."""

    number: int
    """From 1, as the judge's prompt numbers turns (``Turn 2 of 3``)."""
    trace_id: str
    timestamp: str | None
    summary: str
    """The question on one line."""
    input: str
    output: str
    context: list[str] = field(default_factory=list)
    trajectory: TrajectoryView | None = None
    judged: bool = False
    """The turn that closed this version (its last)."""


@dataclass(frozen=True)
class SessionView:
    """A conversation for a page."""

    id: str = ""
    turns: list[TurnView] = field(default_factory=list)
    earlier_turns: int = 0
    """Turns before the first shown (past :data:`MAX_TURNS`), not shown."""
    closed_by: str | None = None
    """Why this version was closed (``idle``, ``end``, ``max_age``, ``final_wait``)."""
    problem: str | None = None
    """Why the stored session could not be read (the page shows the rest)."""


def session_view(data: Any) -> SessionView | None:
    """The view of a sample's stored ``session`` (None: the sample has none).

    Args:
        data: The session's JSON form as kept with the verdict.
    """
    if data is None:
        return None
    try:
        session = Session.model_validate(data)
    except (ValidationError, RecursionError) as exc:
        return SessionView(problem=unreadable("session", exc))
    total = len(session.turns)
    skipped = max(0, total - MAX_TURNS)
    turns = [TurnView(number=n, trace_id=turn.trace_id,
                      timestamp=turn.timestamp.isoformat() if turn.timestamp else None,
                      summary=plain_text(turn.input or "(no question)", limit=SUMMARY_CHARS),
                      input=cut(turn.input), output=cut(turn.output),
                      context=[cut(text) for text in turn.context],
                      trajectory=trajectory_view(turn.trajectory.model_dump(mode="json"))
                      if turn.trajectory is not None else None,
                      judged=n == total)
             for n, turn in enumerate(session.turns[skipped:], skipped + 1)]
    return SessionView(id=session.id, turns=turns, earlier_turns=skipped,
                       closed_by=session.closed_by)
