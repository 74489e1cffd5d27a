"""The alert state machine: transitions, hysteresis, renotify, no data."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from evalfleet.alerts.detector import Observation
from evalfleet.alerts.state import AlertState, Policy, advance

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
POLICY = Policy(for_count=3, recovery_count=2, renotify=timedelta(hours=1), no_data="no_data")


def drive(observations: list[Observation], *, policy: Policy = POLICY,
          start: AlertState | None = None) -> tuple[list[str], list[str]]:
    """States and events after each observation, one minute apart."""
    state = start or AlertState.initial(T0)
    states, events = [], []
    for i, observation in enumerate(observations):
        step = advance(state, observation, policy=policy, at=T0 + timedelta(minutes=i + 1))
        state = step.state
        states.append(state.state)
        events.extend(step.events)
    return states, events


@pytest.mark.parametrize("observations,states,events", [
    (["breach"] * 3, ["pending", "pending", "firing"], ["firing"]),
    (["breach", "breach", "hold", "breach"], ["pending", "pending", "ok", "pending"], []),
    (["breach", "insufficient_data"], ["pending", "insufficient_data"], []),
    (["breach"] * 3 + ["clear", "hold", "clear", "clear"],
     ["pending", "pending", "firing", "firing", "firing", "firing", "resolved"],
     ["firing", "resolved"]),
    (["breach"] * 3 + ["insufficient_data"] * 2 + ["no_data"],
     ["pending", "pending", "firing", "firing", "firing", "firing"], ["firing"]),
    (["clear", "no_data", "no_data", "clear"], ["ok", "no_data", "no_data", "ok"],
     ["no_data", "data_back"]),
    (["no_data", "clear"], ["no_data", "ok"], []),  # never had data: it has not stopped
    (["clear", "hold"], ["ok", "ok"], []),
])
def test_transitions(observations: list[Observation], states: list[str],
                     events: list[str]) -> None:
    assert drive(observations) == (states, events)


def test_a_flapping_breach_notifies_at_most_once() -> None:
    flapping: list[Observation] = ["breach", "hold", "clear", "breach", "breach", "hold"] * 20
    _, events = drive(flapping)
    assert len(events) <= 1
    _, events = drive(flapping, policy=Policy(1, 2, timedelta(hours=4), "no_data"))
    assert events == ["firing"]  # once fired, a hold between clears keeps it up


def test_recovery_notifies_resolved_exactly_once() -> None:
    _, events = drive(["breach"] * 3 + ["clear"] * 10)
    assert events == ["firing", "resolved"]


def test_renotify_while_firing() -> None:
    _, events = drive(["breach"] * 3 + ["breach"] * 150)
    assert events == ["firing", "renotify", "renotify"]


@pytest.mark.parametrize("policy,expected", [("ok", ["ok"]), ("keep_state", ["pending"])])
def test_no_data_policies(policy: str, expected: list[str]) -> None:
    start = AlertState("pending", since=T0, breaches=1, breach_started_at=T0)
    states, events = drive(["no_data"], start=start,
                           policy=Policy(3, 2, timedelta(hours=1), policy))  # type: ignore[arg-type]
    assert states == expected and events == []


def test_every_notification_takes_the_next_sequence_number() -> None:
    state = AlertState.initial(T0)
    numbers = []
    for i, observation in enumerate(["clear", "no_data", "breach", "breach", "breach", "clear",
                                     "clear"]):
        step = advance(state, observation, policy=POLICY,  # type: ignore[arg-type]
                       at=T0 + timedelta(minutes=i))
        numbers += step.numbered()
        state = step.state
    assert numbers == [(1, "no_data"), (2, "data_back"), (3, "firing"), (4, "resolved")]
