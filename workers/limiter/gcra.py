"""Rate arithmetic: the generic cell rate algorithm, as plain functions. Pure.

A limit of R units per minute spaces units ``60 / R`` seconds apart. The state
is one number per limit, the theoretical arrival time (TAT): when the budget
is next free if traffic ran exactly at the limit. A request may go at
``TAT - burst``; if that is later than now, the caller waits, or goes away and
comes back. Going moves the TAT on by ``cost * interval``. Over any window of
W seconds at most ``(W + burst) / interval`` units start, plus the cost of one
request, so a small burst keeps every window close to the limit while a queue
of waiting callers keeps it full.

The burst is :data:`BURST_S`, a tenth of a second of budget. A cold start on a
backlog sends that at once, then keeps the pace, so a 10 s window holds at most
the limit plus 1% (plus one request, or one request's tokens for a tokens-per-
minute limit); calls that leave late on a busy machine add a little more (103-104%
measured with 0.25 s, on a fully loaded 2-core machine). It is not zero so that
calls reaching the limiter a few milliseconds late after an idle spell still find
their slot; with a backlog the callers reserve up to ``max_wait_s`` ahead, so the
budget stays full either way (99.9% of it measured).

The Redis implementation runs the same arithmetic in a Lua script, atomically
for the whole fleet.
"""

from __future__ import annotations

from dataclasses import dataclass

#: How far ahead of the limit's pace a reservation may start, in seconds: at most
#: 1% of a 10 s window.
BURST_S = 0.1


@dataclass(frozen=True, slots=True)
class Plan:
    """What reserving ``cost`` units would do to one limit."""

    tat_s: float
    """The limit's TAT after the reservation."""

    wait_s: float
    """How long the caller must wait before sending (0: now)."""


def plan(*, tat_s: float | None, now_s: float, cost: float, interval_s: float,
         burst_s: float) -> Plan:
    """Plan a reservation of ``cost`` units on one limit.

    Args:
        tat_s: The stored TAT, or None for a limit never used (or expired).
        now_s: The current time.
        cost: Units wanted (1 request, or N tokens).
        interval_s: Seconds per unit at the limit (60 / units per minute).
        burst_s: How far ahead of the limit's pace a reservation may start.

    Returns:
        The new TAT and the wait.
    """
    start = now_s if tat_s is None else max(tat_s, now_s)
    return Plan(tat_s=start + cost * interval_s, wait_s=max(0.0, start - burst_s - now_s))


def refund(*, tat_s: float | None, now_s: float, units: float, interval_s: float) -> float | None:
    """The TAT after giving back ``units`` (negative: charging more), never before now.

    Used when the real token count of a call is known: the estimate made before
    the call is corrected by the difference.
    """
    if tat_s is None:
        return None
    return max(now_s, tat_s - units * interval_s)


def interval_for(per_minute: float | None) -> float:
    """Seconds per unit for a per-minute limit; 0 means unlimited."""
    return 60.0 / per_minute if per_minute else 0.0
