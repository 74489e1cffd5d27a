"""Group commit: the claim-and-save calls of several threads in one transaction.

A worker runs many messages at once in threads. Checks scored by code take
microseconds, so a check message's cost is mostly its transaction: a connection
check-out, two statements and a commit, the same for 16 verdicts as for 256. While one
thread's transaction is out at the database, the calls of the others wait here; the
next of them to lead takes every call waiting (up to :data:`MAX_GROUP` and with no key
twice) into one transaction. An idle worker's call leads at once: nothing waits for a
group to fill.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from evalfleet.store.base import Claim, VerdictKey, VerdictRecord

#: Most calls in one transaction (16 jobs a message: 256 verdicts with their samples).
MAX_GROUP = 16


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

    def __post_init__(self) -> None:
        self.wakeup.acquire()


class GroupCommit:
    """Runs calls together: ``run`` gets a group and must set each call's claims or
    error, and mark it done (it is never left to raise).

    One caller leads at a time: it runs a group, wakes the callers of the calls in it,
    and hands the lead to the oldest call still waiting (or keeps it while its own call
    waits). Each waiting caller is woken once, not at every group.
    """

    def __init__(self, run: Callable[[list[ClaimAndSave]], None], *,
                 max_group: int = MAX_GROUP) -> None:
        self._run = run
        self._max_group = max_group
        self._pending: list[ClaimAndSave] = []
        self._leading = False
        self._lock = threading.Lock()

    def submit(self, call: ClaimAndSave) -> list[Claim]:
        """Run ``call`` (alone or with others); its claims, or its error raised."""
        with self._lock:
            self._pending.append(call)
            leads = not self._leading
            self._leading = True
        if not leads:
            call.wakeup.acquire()  # done, or handed the lead
        while not call.done:
            with self._lock:
                group = self._take_group()
            try:
                self._run(group)
            except BaseException as exc:  # not meant to happen: no caller waits for ever
                for member in group:
                    if not member.done:
                        member.error, member.done = exc, True
            finally:
                with self._lock:
                    for member in group:
                        if member is not call:
                            member.wakeup.release()
                    if call.done:  # hand the lead on, or lay it down
                        if self._pending:
                            self._pending[0].wakeup.release()
                        else:
                            self._leading = False
        if call.error is not None:
            raise call.error
        return call.claims

    @property
    def waiting(self) -> int:
        """Calls waiting for a transaction (not the one running)."""
        with self._lock:
            return len(self._pending)

    def _take_group(self) -> list[ClaimAndSave]:
        """The oldest waiting calls, no key in two of them (a statement writes each key
        once); the rest wait for the next group."""
        group: list[ClaimAndSave] = []
        keys: set[VerdictKey] = set()
        rest: list[ClaimAndSave] = []
        for call in self._pending:
            if len(group) < self._max_group and keys.isdisjoint(call.keys):
                group.append(call)
                keys.update(call.keys)
            else:
                rest.append(call)
        self._pending = rest
        return group
