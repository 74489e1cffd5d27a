"""A conversation judged whole: its turns in order, each with its question, answer,
retrieved context and trajectory. Pure.

A sample may carry one (``"session"``); a metric of unit ``session`` reads it. The JSON
form (``docs/producing.md``)::

    {"id": "conv-42",
     "turns": [
        {"trace_id": "5b8e...", "timestamp": "2026-11-21T10:00:00Z",
         "input": "Weather in Oslo?", "output": "4 C and rain.",
         "context": ["..."], "trajectory": {"steps": [...], "tools": [...]}},
        {"trace_id": "77a1...", "input": "And tomorrow?", "output": "..."}],
     "closed_by": "idle"}

A session is judged in *versions*: the turns known when it was closed. A version's
sample id is ``<session id>#<turns>-<digest of its trace ids>``
(:func:`version_id`), so two different sets of turns never share a verdict key, and the
same turns always give the same one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from evalfleet.core.trajectory import Trajectory, map_strings

#: Longest session id kept, in characters: its version id (``#<turns>-<12 hex>``) must
#: fit a sample id (256).
MAX_SESSION_ID_LENGTH = 200

#: Hex characters of the trace-id digest in a version id.
DIGEST_LENGTH = 12

#: Why a session version was closed: quiet for the idle time, an end marker, its
#: maximum age, or quiet past the final wait (the same turns as its idle version,
#: produced again to say that version is final).
ClosedBy = Literal["idle", "end", "max_age", "final_wait"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Turn(_Model):
    """One turn of a conversation: one trace."""

    trace_id: str = Field(min_length=1, max_length=256)
    """The trace that carried the turn."""
    timestamp: datetime | None = None
    """When the turn ended."""
    input: str = ""
    """The user's message."""
    output: str = ""
    """The application's answer."""
    context: list[str] = Field(default_factory=list)
    """Documents retrieved in this turn, in order."""
    trajectory: Trajectory | None = None
    """The turn's agent run, when it had a tool or an agent."""


class Session(_Model):
    """A conversation's turns, in the order they began."""

    id: str = Field(min_length=1, max_length=MAX_SESSION_ID_LENGTH)
    """The session (conversation) id the turns share."""
    turns: list[Turn] = Field(default_factory=list)
    """Its turns, oldest first."""
    closed_by: ClosedBy | None = None
    """Why this version was closed; None for a session not built by the producer."""

    @property
    def final(self) -> bool:
        """True for a version closed by an end marker, its maximum age or its final wait
        (a version closed when idle is final only once its final wait passes with no
        later turn: the producer then sends the same turns again, ``final_wait``)."""
        return self.closed_by in ("end", "max_age", "final_wait")

    @property
    def provisional(self) -> bool:
        """True for a version closed when idle: a later turn may still replace it, so
        its verdict reaches alerts and corrected estimates only once marked final. A
        session not built by the producer (``closed_by`` None) is final as given."""
        return self.closed_by == "idle"

    def map_text(self, change: Callable[[str], str]) -> Session:
        """The session with ``change`` applied to every text of its turns (questions,
        answers, documents, trajectories); ids and times are kept. Linear in its size
        (one dump and one validation for the whole session)."""
        data = self.model_dump(mode="json")
        for turn in data["turns"]:
            for part in ("input", "output", "context", "trajectory"):
                turn[part] = map_strings(turn[part], change)
        return Session.model_validate(data)


def version_id(session_id: str, trace_ids: Sequence[str]) -> str:
    """The sample id of the version made of ``trace_ids`` (in turn order):
    ``<session id>#<turns>-<first 12 hex of sha256 of the ids, one per line>``."""
    digest = hashlib.sha256("\n".join(trace_ids).encode()).hexdigest()[:DIGEST_LENGTH]
    return f"{session_id}#{len(trace_ids)}-{digest}"
