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


class GroupCommit:
    """Runs calls together: ``run`` gets a group and must set each call's claims or
    error (it is never left to raise)."""

    def __init__(self, run: Callable[[list[ClaimAndSave]], None], *,
                 max_group: int = MAX_GROUP) -> None:
        self._run = run
        self._max_group = max_group
        self._pending: list[ClaimAndSave] = []
        self._leading = False
        self._changed = threading.Condition()

    def submit(self, call: ClaimAndSave) -> list[Claim]:
        """Run ``call`` (alone or with others); its claims, or its error raised."""
        with self._changed:
            self._pending.append(call)
        while True:
            with self._changed:
                while not call.done and self._leading:
                    self._changed.wait()
                if call.done:
                    break
                self._leading = True
                group = self._take_group()
            try:
                self._run(group)
            finally:
                with self._changed:
                    self._leading = False
                    self._changed.notify_all()
        if call.error is not None:
            raise call.error
        return call.claims

    @property
    def waiting(self) -> int:
        """Calls waiting for a transaction (not the one running)."""
        with self._changed:
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
