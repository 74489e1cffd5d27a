"""The alert state machine of one rule and segment. Pure: state and observation in, step out.

States::

    ok ──breach──> pending ──(for) breaches──> firing ──(recovery.for) clears──> resolved
    │                │ anything else: back to ok      │ hold / insufficient data: stays
    ├─ too few samples ──> insufficient_data           └─ renotify interval: notify again
    └─ no traffic at all (whole rule only) ──> no_data

Only these are notified: ``firing``, ``resolved``, ``renotify`` (still firing after
the renotify interval) and, for the whole rule, ``no_data`` (traffic that was judged
stopped) and ``data_back`` (it came back). A segment starts in insufficient_data.
Pending is never notified, so a mean that flaps at the line notifies at most
once: firing needs consecutive breaches, resolving needs consecutive clears
by a margin.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Literal

from evalfleet.alerts.detector import Observation

StateName = Literal["ok", "insufficient_data", "pending", "firing", "resolved", "no_data"]
Event = Literal["firing", "resolved", "renotify", "no_data", "data_back"]
NoDataPolicy = Literal["no_data", "ok", "keep_state"]

#: States in the order a person should look at them, what needs someone first: the
#: overview page and ``alerts list`` sort their rows by it.
ATTENTION_ORDER: dict[str, int] = {"firing": 0, "pending": 1, "no_data": 2, "resolved": 3,
                                   "ok": 4, "insufficient_data": 5}


@dataclass(frozen=True)
class AlertState:
    """Where one rule and segment stand."""

    state: StateName
    """The state."""
    since: datetime
    """When it entered this state."""
    breaches: int = 0
    """Consecutive breaching evaluations (pending and firing)."""
    clears: int = 0
    """Consecutive clear evaluations while firing."""
    breach_started_at: datetime | None = None
    """The first breach of the current run of breaches."""
    fired_at: datetime | None = None
    """When it last started firing."""
    notified_at: datetime | None = None
    """When it last notified while firing (for renotify)."""
    transitions: int = 0
    """Notifications made so far; numbers the next one (its idempotency key)."""
    announced: bool = False
    """Whether entering the current state was notified (a ``no_data`` entered without
    notice leaves without notice too)."""

    @classmethod
    def initial(cls, at: datetime) -> AlertState:
        """The state of a segment seen for the first time: it has had no data to judge."""
        return cls("insufficient_data", since=at)


@dataclass(frozen=True)
class Policy:
    """The parts of a rule the state machine needs."""

    for_count: int
    """Consecutive breaches before firing."""
    recovery_count: int
    """Consecutive clears before resolving."""
    renotify: timedelta
    """While firing, notify again this often."""
    no_data: NoDataPolicy
    """What no traffic at all means."""


@dataclass(frozen=True)
class Step:
    """The outcome of one evaluation."""

    state: AlertState
    """The new state."""
    events: tuple[Event, ...] = ()
    """What to notify, in order. Each took one number of ``state.transitions``: the
    last event has ``state.transitions``, the one before it one less."""

    def numbered(self) -> list[tuple[int, Event]]:
        """The events with their sequence numbers."""
        first = self.state.transitions - len(self.events) + 1
        return list(enumerate(self.events, start=first))


def advance(current: AlertState, observation: Observation, *, policy: Policy,
            at: datetime) -> Step:
    """Move one rule and segment on by one evaluation.

    Args:
        current: Where it stands.
        observation: What this evaluation saw.
        policy: The rule's settings.
        at: The evaluation time.

    Returns:
        The new state and the events to notify.
    """
    if observation == "no_data":
        return _no_data(current, policy=policy, at=at)
    events: tuple[Event, ...] = ()
    if current.state == "no_data" and current.announced:
        events = ("data_back",)
        current = replace(_enter(current, "ok", at), transitions=current.transitions + 1)
    step = _observe(current, observation, policy=policy, at=at)
    return Step(step.state, events + step.events)


def _observe(current: AlertState, observation: Observation, *, policy: Policy,
             at: datetime) -> Step:
    if current.state == "firing":
        return _while_firing(current, observation, policy=policy, at=at)
    if observation == "breach":
        breaches = current.breaches + 1 if current.state == "pending" else 1
        started = current.breach_started_at if current.state == "pending" else at
        if breaches >= policy.for_count:
            fired = replace(_enter(current, "firing", at), breaches=breaches,
                            breach_started_at=started, fired_at=at)
            return _notify(fired, "firing", at)
        pending = current if current.state == "pending" else _enter(current, "pending", at)
        return Step(replace(pending, breaches=breaches, breach_started_at=started))
    if observation == "insufficient_data":
        return Step(_enter(current, "insufficient_data", at))
    return Step(_enter(current, "ok", at))  # clear or hold


def _while_firing(current: AlertState, observation: Observation, *, policy: Policy,
                  at: datetime) -> Step:
    if observation == "clear":
        clears = current.clears + 1
        if clears >= policy.recovery_count:
            return _notify(_enter(current, "resolved", at), "resolved", at)
        return _renotify_if_due(replace(current, clears=clears), policy=policy, at=at)
    breaches = current.breaches + 1 if observation == "breach" else current.breaches
    return _renotify_if_due(replace(current, clears=0, breaches=breaches), policy=policy, at=at)


def _no_data(current: AlertState, *, policy: Policy, at: datetime) -> Step:
    if policy.no_data == "keep_state":
        return Step(current)
    if policy.no_data == "ok":
        return _observe(current, "clear", policy=policy, at=at)
    if current.state == "firing":
        # No data cannot show a recovery: keep the alert up.
        return _while_firing(current, "hold", policy=policy, at=at)
    if current.state == "no_data":
        return Step(current)
    if current.state == "insufficient_data":
        # Traffic that never amounted to anything has not stopped: no news.
        return Step(_enter(current, "no_data", at))
    return _notify(_enter(current, "no_data", at), "no_data", at)


def _renotify_if_due(current: AlertState, *, policy: Policy, at: datetime) -> Step:
    last = current.notified_at or current.fired_at or current.since
    if at - last >= policy.renotify:
        return _notify(current, "renotify", at)
    return Step(current)


def _enter(current: AlertState, state: StateName, at: datetime) -> AlertState:
    """A new state: counters reset, the notification sequence and history kept."""
    return AlertState(state, since=at, fired_at=current.fired_at,
                      notified_at=current.notified_at, transitions=current.transitions)


def _notify(state: AlertState, event: Event, at: datetime) -> Step:
    notified = replace(state, transitions=state.transitions + 1, announced=True,
                       notified_at=at if event in ("firing", "renotify") else state.notified_at)
    return Step(notified, (event,))
