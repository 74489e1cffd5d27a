"""The session buffer in this process's memory: ``evalfleet produce --format otlp-json``
and ``evalfleet ingest`` without Redis. Turns of an ingest killed mid-session are lost
with it; the Redis buffer is the one that survives.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import orjson

from producers.traces.conversation import TurnIn
from producers.traces.sessions.base import (
    SESSION_LEASE_S,
    ClaimedSession,
    SessionBuffer,
    SessionTiming,
    Shed,
)


@dataclass
class _Held:
    first_s: float
    last_s: float
    due_s: float = float("inf")
    turns: dict[str, str] = field(default_factory=dict)
    size_bytes: int = 0
    judged: int = 0
    ended: bool = False
    aged: bool = False
    last_closed: str | None = None


class MemorySessionBuffer(SessionBuffer):
    """Turns per session in a dict, due times beside them. Thread-safe."""

    def __init__(self, *, timing: SessionTiming) -> None:
        """Buffer with ``timing``."""
        self._timing = timing
        self._held: dict[str, _Held] = {}
        self._lock = threading.Lock()

    def add(self, turns: Sequence[TurnIn], *, now_s: float) -> list[Shed]:
        """See :meth:`SessionBuffer.add`."""
        timing = self._timing
        shed = []
        with self._lock:
            for turn in turns:
                held = self._held.get(turn.session_id)
                if held is None:
                    if turn.body is None:
                        continue  # an end marker of a session not held: nothing to close
                    if len(self._held) >= timing.max_open_sessions:
                        shed.append(Shed(turn.session_id, "too_many_open_sessions"))
                        continue
                    held = _Held(first_s=now_s, last_s=now_s)
                reason = self._keep(held, turn, now_s=now_s)
                if reason is not None:
                    shed.append(Shed(turn.session_id, reason))
                if held.turns:
                    self._held[turn.session_id] = held
                    held.ended = held.ended or turn.ends
                    if len(held.turns) > held.judged or held.ended:
                        held.due_s = timing.deadline(first_s=held.first_s, last_s=held.last_s,
                                                     aged=held.aged, ended=held.ended,
                                                     now_s=now_s)
        return shed

    def _keep(self, held: _Held, turn: TurnIn, *, now_s: float) -> str | None:
        if turn.body is None or turn.trace_id in held.turns:
            return None
        if len(held.turns) >= self._timing.max_turns_per_session:
            return "too_many_turns"
        size = len(turn.body.encode())
        if held.size_bytes + size > self._timing.max_session_bytes:
            return "session_too_large"
        held.turns[turn.trace_id] = turn.body
        held.size_bytes += size
        held.last_s = now_s
        return None

    def claim_due(self, *, now_s: float, limit: int) -> tuple[list[ClaimedSession], int]:
        """See :meth:`SessionBuffer.claim_due`."""
        timing = self._timing
        claimed: list[ClaimedSession] = []
        forgotten = 0
        with self._lock:
            due = sorted((held.due_s, session_id) for session_id, held in self._held.items()
                         if held.due_s <= now_s)
            for _, session_id in due:
                held = self._held[session_id]
                fresh = len(held.turns) > held.judged
                if not fresh and held.last_closed != "idle":
                    # Past its final wait (or ended) with nothing new: its last version
                    # stands, and is final.
                    del self._held[session_id]
                    forgotten += 1
                    continue
                if len(claimed) == limit:
                    break
                closed_by = timing.closed_by(first_s=held.first_s, aged=held.aged,
                                             ended=held.ended, fresh=fresh, now_s=now_s)
                held.due_s = now_s + SESSION_LEASE_S
                claimed.append(ClaimedSession(session_id,
                                              [orjson.loads(b) for b in held.turns.values()],
                                              closed_by))
        return claimed, forgotten

    def finish(self, sessions: Sequence[ClaimedSession], *, now_s: float) -> None:
        """See :meth:`SessionBuffer.finish`."""
        timing = self._timing
        with self._lock:
            for session in sessions:
                held = self._held.get(session.session_id)
                if held is None:
                    continue
                held.judged = len(session.envelopes)
                held.last_closed = session.closed_by
                held.aged = held.aged or session.closed_by == "max_age"
                held.ended = held.ended and session.closed_by != "end"
                if len(held.turns) > held.judged or held.ended:
                    held.due_s = timing.deadline(first_s=held.first_s, last_s=held.last_s,
                                                 aged=held.aged, ended=held.ended, now_s=now_s)
                else:
                    held.due_s = held.last_s + timing.final_s

    def open_sessions(self) -> int:
        """See :meth:`SessionBuffer.open_sessions`."""
        with self._lock:
            return len(self._held)

    def oldest_first_s(self) -> float | None:
        """See :meth:`SessionBuffer.oldest_first_s`."""
        with self._lock:
            return min((held.first_s for held in self._held.values()), default=None)
