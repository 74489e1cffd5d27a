"""From traces to conversations: which session a trace belongs to, whether it ends it,
the turn it makes, and the sample record of a session's version. Pure.

A trace names its session on any of its spans (or their resource), read in this order:
the attribute the sampling config names (``traces.sessions.attribute``), then
OpenInference's ``session.id``, GenAI's ``gen_ai.conversation.id`` and Traceloop's
``traceloop.association.properties.session_id``. The trace is assembled whole before
this is read, so a session id carried only by a span that arrives last still groups
the turn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evalfleet.core.session import MAX_SESSION_ID_LENGTH, ClosedBy, version_id
from producers.traces.config import SessionSpec
from producers.traces.span import Span

#: Attributes naming a session, by convention, in the order they are read.
SESSION_ATTRIBUTES = ("session.id", "gen_ai.conversation.id",
                      "traceloop.association.properties.session_id")

#: Steps of a turn's trajectory kept in its session (model calls repeat the conversation,
#: which the turns already hold: keeping them made a session quadratic in its length).
_KEPT_STEPS = ("tool", "retrieval", "handoff")


@dataclass(frozen=True, slots=True)
class SessionMark:
    """What a trace says about its session."""

    session_id: str | None
    """The session it belongs to; None when no span names one (or the name is bad)."""
    problem: str | None = None
    """``bad_session_id`` when a span names a session unusably."""
    ends: bool = False
    """True when the trace carries the configured end marker."""


@dataclass(frozen=True, slots=True)
class TurnIn:
    """A trace offered to its session: its turn, or only its end marker."""

    session_id: str
    """The session."""
    trace_id: str
    """The trace (a turn is kept once per trace id)."""
    body: str | None
    """The turn's envelope as JSON text (see :func:`turn_envelope`); None for a trace
    that gave no turn (no question or answer) but may end the session."""
    ends: bool = False
    """It carries the end marker."""


def mark_session(spans: Sequence[Span], spec: SessionSpec) -> SessionMark:
    """The session ``spans`` name and whether they end it.

    Args:
        spans: Every span of one trace, in start order.
        spec: The ``traces.sessions`` section.
    """
    ends = any(_ends(span, spec) for span in spans)
    names = (*([spec.attribute] if spec.attribute else []), *SESSION_ATTRIBUTES)
    for name in names:
        for span in spans:
            for source in (span.attributes, span.resource):
                if name in source:
                    value = source[name]
                    if isinstance(value, int) and not isinstance(value, bool):
                        value = str(value)
                    if (not isinstance(value, str) or not value.strip()
                            or len(value) > MAX_SESSION_ID_LENGTH or not value.isprintable()):
                        return SessionMark(None, "bad_session_id", ends)
                    return SessionMark(value, None, ends)
    return SessionMark(None, None, ends)


def _ends(span: Span, spec: SessionSpec) -> bool:
    if span.name in spec.end.span_name:
        return True
    if spec.end.attribute is None:
        return False
    value = span.attributes.get(spec.end.attribute)
    return value is True or (isinstance(value, str) and value.lower() == "true")


def turn_envelope(record: Mapping[str, Any], *, trace_id: str, order_ns: int) -> dict[str, Any]:
    """The turn a trace's sample record makes, with what its session needs around it.

    Args:
        record: The trace's sample record (:func:`producers.traces.mapping.map_trace`).
        trace_id: The trace.
        order_ns: When the trace began (turns are ordered by it, then by trace id).

    Returns:
        ``{"order", "turn", "attributes"}``: the turn in its JSON form, the record's
        segments (the session's are its last turn's).
    """
    turn: dict[str, Any] = {
        "trace_id": trace_id, "timestamp": record.get("timestamp"),
        "input": record.get("input") or "", "output": record.get("output") or "",
        "context": list(record.get("context") or [])}
    trajectory = record.get("trajectory")
    if trajectory:
        turn["trajectory"] = {
            "steps": [s for s in trajectory.get("steps", []) if s.get("type") in _KEPT_STEPS],
            "final_answer": trajectory.get("final_answer")}
    return {"order": order_ns, "turn": turn, "attributes": dict(record.get("attributes") or {})}


def session_record(session_id: str, envelopes: Sequence[Mapping[str, Any]], *,
                   closed_by: ClosedBy) -> dict[str, Any]:
    """The sample record of one version of a session.

    Args:
        session_id: The session.
        envelopes: Its turns' envelopes, in any order (sorted here by start, trace id).
        closed_by: Why this version was closed.

    Returns:
        The record: id ``<session>#<turns>-<digest>``, the first question as ``input``,
        the last answer as ``output``, the last turn's time and segments, the turns in
        ``session``.
    """
    ordered = sorted(envelopes, key=lambda e: (e["order"], e["turn"]["trace_id"]))
    turns = [e["turn"] for e in ordered]
    last = turns[-1]
    return {
        "id": version_id(session_id, [t["trace_id"] for t in turns]),
        "timestamp": last.get("timestamp"), "input": turns[0]["input"],
        "output": last["output"], "context": [],
        "attributes": dict(ordered[-1]["attributes"]),
        "fields": {"session_id": session_id, "turns": len(turns)},
        "session": {"id": session_id, "turns": turns, "closed_by": closed_by},
    }
