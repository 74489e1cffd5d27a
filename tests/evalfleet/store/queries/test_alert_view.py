"""A rule and segment's changes of state as the alert page reads them back: as the engine
wrote them, the newest ``limit`` of them, oldest first, on both stores."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from evalfleet.alerts.ledger import record_transitions, transition_row
from evalfleet.alerts.segment import Segment
from evalfleet.store import SqlStore
from evalfleet.store.queries.alert_view import Transition, state_changes

T0 = datetime(2026, 11, 20, 10, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def test_the_latest_changes_of_state_come_back_oldest_first(any_store: SqlStore) -> None:
    app = Segment.of({"app": "support-bot"})
    steps = [("ok", "pending", ()), ("pending", "firing", ("firing",)),
             ("firing", "firing", ("repeat", "escalated")), ("firing", "ok", ("resolved",))]
    rows = [transition_row(rule="drop", segment=app, at=T0 + i * MINUTE, previous=previous,
                           state=state, events=events, finding={"n": 10 * i})
            for i, (previous, state, events) in enumerate(steps)]
    rows += [transition_row(rule="drop", segment=Segment(), at=T0, previous="ok",
                            state="firing", events=("firing",), finding={}),
             transition_row(rule="other", segment=app, at=T0 + 9 * MINUTE, previous="ok",
                            state="firing", events=("firing",), finding={})]
    with any_store.begin() as conn:
        record_transitions(conn, rows)
    with any_store.connect() as conn:
        latest = state_changes(conn, rule="drop", segment_key=app.key, limit=3)
        everything = state_changes(conn, rule="drop", segment_key=app.key, limit=10)
    assert latest == [
        Transition(at=T0 + MINUTE, previous="pending", state="firing", events=("firing",),
                   finding={"n": 10}),
        Transition(at=T0 + 2 * MINUTE, previous="firing", state="firing",
                   events=("repeat", "escalated"), finding={"n": 20}),
        Transition(at=T0 + 3 * MINUTE, previous="firing", state="ok", events=("resolved",),
                   finding={"n": 30}),
    ]
    assert everything[0] == Transition(at=T0, previous="ok", state="pending", events=(),
                                       finding={"n": 0})
    assert everything[1:] == latest
