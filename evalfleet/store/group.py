"""Group commit: the claim-and-save calls of several threads in one transaction.

A worker runs many messages at once in threads. Checks scored by code take
microseconds, so a check message's cost is mostly its transaction: a connection
check-out, two statements and a commit, the same for 16 verdicts as for 256. While one
thread's transaction is out at the database, the calls of the others wait here; the
next of them to lead takes every call waiting (up to :data:`MAX_GROUP` and with no key
twice) into one transaction; up to :data:`LEADERS` such transactions run at once. An
idle worker's call leads at once: nothing waits for a group to fill.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from evalfleet.store.base import Claim, VerdictKey, VerdictRecord

#: Most calls in one transaction (16 jobs a message: 256 verdicts with their samples).
MAX_GROUP = 16

#: Groups a store runs at once (on connections of their own).
LEADERS = 2


@dataclass(eq=False)
class ClaimAndSave:
    """One caller's :meth:`VerdictStore.claim_and_save`, and what came of it."""

    keys: Sequence[VerdictKey]
    owner: str
    lease_s: float
    now: datetime
    settle: Callable[[list[Claim]], Sequence[VerdictRecord]]
    claims: list[Claim] = field(default_factory=list)
    error: BaseException | None = None
    done: bool = False
    wakeup: threading.Lock = field(default_factory=threading.Lock)
    """Held until the leader releases it: the call is done, or its caller leads next."""
    leads: bool = False
    """Its caller leads (or was woken to): no other leader takes it into a group."""

    def __post_init__(self) -> None:
        self.wakeup.acquire()


class GroupCommit:
    """Runs calls together: ``run`` gets a group and must set each call's claims or
    error, and mark it done (it is never left to raise).

    Up to ``leaders`` callers lead at a time, each running one group that holds its own
    call and the oldest others waiting (no key twice in a group, nor in two groups
    running at once, so two groups of one process never wait on each other's rows).
    With two, the database works on one group's statements while the other's leader
    prepares its rows and the caller threads run: one at a time, the database sat idle
    whenever the leader's thread waited for Python's lock. A leader done wakes the
    callers of its group and hands the lead to the oldest call still waiting. Each
    waiting caller is woken once: when its call is done, or when it is to lead.
    """

    def __init__(self, run: Callable[[list[ClaimAndSave]], None], *,
                 max_group: int = MAX_GROUP, leaders: int = 1) -> None:
        self._run = run
        self._max_group = max_group
        self._leaders = leaders
        self._pending: list[ClaimAndSave] = []
        self._leading = 0
        self._running: set[VerdictKey] = set()
        self._lock = threading.Lock()

    def submit(self, call: ClaimAndSave) -> list[Claim]:
        """Run ``call`` (alone or with others); its claims, or its error raised."""
        with self._lock:
            self._pending.append(call)
            if self._leading < self._leaders:
                self._leading += 1
                call.leads = True
        if not call.leads:
            call.wakeup.acquire()  # done, or handed the lead
        while not call.done:
            with self._lock:
                group = self._take_group(call)
                if not group:  # its keys are in a group running: wait for that one
                    call.leads = False
                    self._leading -= 1
            if not group:
                call.wakeup.acquire()
                continue
            try:
                self._run(group)
            except BaseException as exc:  # not meant to happen: no caller waits for ever
                for member in group:
                    if not member.done:
                        member.error, member.done = exc, True
            finally:
                for member in group:  # a run must settle each call; one it left fails
                    if not member.done:
                        member.error = RuntimeError("the group's run left the call unsettled")
                        member.done = True
                with self._lock:
                    for member in group:
                        self._running.difference_update(member.keys)
                        if member is not call:
                            member.wakeup.release()
                    call.leads = False
                    self._leading -= 1
                    self._hand_on()
        if call.error is not None:
            raise call.error
        return call.claims

    @property
    def waiting(self) -> int:
        """Calls waiting for a transaction (not those running)."""
        with self._lock:
            return len(self._pending)

    def _take_group(self, call: ClaimAndSave) -> list[ClaimAndSave]:
        """``call`` and the oldest calls waiting but not leading, no key twice and none
        of a group running; empty when ``call``'s keys are in a group running."""
        if not self._running.isdisjoint(call.keys):
            return []
        group = [call]
        keys: set[VerdictKey] = set(call.keys)
        rest: list[ClaimAndSave] = []
        for other in self._pending:
            if other is call:
                continue
            if (len(group) < self._max_group and not other.leads
                    and keys.isdisjoint(other.keys) and self._running.isdisjoint(other.keys)):
                group.append(other)
                keys.update(other.keys)
            else:
                rest.append(other)
        self._pending = rest
        self._running.update(keys)
        return group

    def _hand_on(self) -> None:
        """Wake the oldest waiting calls that may run now to lead, up to ``leaders``."""
        for other in self._pending:
            if self._leading >= self._leaders:
                return
            if not other.leads and self._running.isdisjoint(other.keys):
                other.leads = True
                self._leading += 1
                other.wakeup.release()
