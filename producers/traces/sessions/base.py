"""The session buffer contract: turns kept per session until a version of it is due.

A session is *due* once no turn of it arrived for the idle time, at once when a trace
carries the end marker, or once its maximum age since its first turn passed (once; later
turns of a session past that age wait for the idle time). :meth:`SessionBuffer.claim_due`
hands a due session out with a lease, as the trace buffer does, so a claimer that dies
leaves it to be claimed again. :meth:`SessionBuffer.finish` records the version produced
and keeps the turns for the final wait after the last turn: a turn arriving meanwhile
makes the next version (all the turns so far), due when it goes quiet again. Once the
final wait passes with nothing new, a session whose last version was closed when idle is
claimed once more with the same turns, closed by ``final_wait`` (an end marker arriving
with nothing new does the same, closed by ``end``): that version has the same sample id
and so the same verdict key, and its job marks the idle version's verdict final instead
of judging again (``docs/traces.md``). The next claim forgets a session whose last
version is final. A turn is kept
once per trace id, so a trace produced twice (its lease ended) adds no second turn.

Bounds (what is shed is returned by reason, and counted by the caller): sessions held at
once, turns per session, bytes per session.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from evalfleet.core.session import ClosedBy
from producers.traces.conversation import TurnIn

#: Seconds a claimed session stays with its claimer before it is due again.
SESSION_LEASE_S = 30.0


@dataclass(frozen=True, slots=True)
class SessionTiming:
    """When sessions are due, and how much is kept."""

    idle_s: float = 900.0
    """A session is due this long after its last turn."""
    final_s: float = 3600.0
    """Its turns are kept this long after its last turn, for a late turn's version."""
    max_age_s: float = 86_400.0
    """A session is due this long after its first turn at the latest (once)."""
    max_open_sessions: int = 100_000
    """Sessions held at once; a turn opening one more is shed."""
    max_turns_per_session: int = 1000
    """Turns kept per session; later ones are shed."""
    max_session_bytes: int = 8 * 1024 * 1024
    """Bytes kept per session (its turns' JSON); a turn past it is shed."""

    def deadline(self, *, first_s: float, last_s: float, aged: bool, ended: bool,
                 now_s: float) -> float:
        """When a session with turns not yet judged is due."""
        if ended:
            return now_s
        due = last_s + self.idle_s
        return due if aged else min(due, first_s + self.max_age_s)

    def closed_by(self, *, first_s: float, aged: bool, ended: bool, fresh: bool,
                  now_s: float) -> ClosedBy:
        """Why a session claimed at ``now_s`` is closed (``fresh``: it has turns not
        judged yet; without, its idle version is claimed again to be made final)."""
        if ended:
            return "end"
        if not fresh:
            return "final_wait"
        if not aged and now_s >= first_s + self.max_age_s:
            return "max_age"
        return "idle"


@dataclass(frozen=True, slots=True)
class ClaimedSession:
    """A due session, leased to one claimer."""

    session_id: str
    """The session."""
    envelopes: list[dict[str, Any]]
    """Its turns' envelopes (:func:`producers.traces.conversation.turn_envelope`), in no
    particular order."""
    closed_by: ClosedBy
    """Why this version is closed."""


@dataclass(frozen=True, slots=True)
class Shed:
    """A turn not kept, and why."""

    session_id: str
    """Its session."""
    reason: str
    """``too_many_open_sessions``, ``too_many_turns`` or ``session_too_large``."""


class SessionBuffer(ABC):
    """Where turns wait for their session to go quiet. Thread-safe."""

    @abstractmethod
    def add(self, turns: Sequence[TurnIn], *, now_s: float) -> list[Shed]:
        """Keep ``turns`` with their sessions (an end marker makes its session due now).

        Returns:
            The turns shed, with the reason.

        Raises:
            BrokerUnavailable: When the buffer cannot be reached (nothing kept).
        """

    @abstractmethod
    def claim_due(self, *, now_s: float, limit: int) -> tuple[list[ClaimedSession], int]:
        """Lease up to ``limit`` due sessions to the caller (a session past its final
        wait whose last version was closed when idle: once more, closed by
        ``final_wait``), and forget those past their final wait whose last version is
        final.

        Returns:
            The claimed sessions, and how many were forgotten.

        Raises:
            BrokerUnavailable: When the buffer cannot be reached.
        """

    @abstractmethod
    def finish(self, sessions: Sequence[ClaimedSession], *, now_s: float) -> None:
        """Record the versions produced: keep the turns for the final wait, or make the
        session due again when turns arrived while it was claimed.

        Raises:
            BrokerUnavailable: When the buffer cannot be reached.
        """

    @abstractmethod
    def open_sessions(self) -> int:
        """Sessions held now."""

    @abstractmethod
    def oldest_first_s(self) -> float | None:
        """When the oldest session held got its first turn (epoch seconds); None when
        none is held.

        Raises:
            BrokerUnavailable: When the buffer cannot be reached.
        """
