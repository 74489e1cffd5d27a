"""What the alert engine remembers in the store: cycles run, states, baseline exclusions.

Several evaluators may run at once (two beats, a cron ``alerts check`` beside the
beat). Two mechanisms keep them from notifying twice:

- a rule is evaluated once per cycle slot (``floor(time / interval)``): the
  evaluator that records the slot first evaluates it, the others skip;
- the states of a rule are read, advanced and written, and their notifications
  queued, in one transaction under an advisory lock on the rule, so even
  overlapping cycles see each other's states and never queue one transition twice.

The statements are the store's (``evalfleet.store.queries.alert_ledger``); this module
decides what is written and when.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from evalfleet.alerts.segment import Segment
from evalfleet.alerts.state import AlertState, StateName
from evalfleet.store import SqlStore, StoreConnection
from evalfleet.store.queries import alert_ledger
from evalfleet.store.queries.alert_ledger import AlertStateRow


@dataclass(frozen=True)
class StoredState:
    """A state row: the segment, its state and the numbers of its last evaluation."""

    rule: str
    """The rule."""
    segment: Segment
    """The segment."""
    state: AlertState
    """The state."""
    evaluated_at: datetime
    """When it was last evaluated."""
    finding: dict[str, Any]
    """The numbers of that evaluation (see ``detector.finding_details``)."""
    detector: dict[str, Any] | None = None
    """A sequential rule's detector states by test (``edetector``); None for others."""


def claim_slot(store: SqlStore, *, rule: str, slot: int, at: datetime) -> bool:
    """Record that this evaluator runs ``rule`` in cycle ``slot``.

    Args:
        store: The verdict store.
        rule: The rule's name.
        slot: The cycle number, ``floor(at / interval)``.
        at: The evaluation time.

    Returns:
        True if this evaluator should evaluate; False if another already did.
    """
    return alert_ledger.claim_rule_slot(store, rule=rule, slot=slot, at=at)


def rule_transaction(store: SqlStore, rule: str) -> AbstractContextManager[StoreConnection]:
    """A transaction holding the rule's lock until it ends (on SQLite, the database's one
    write lock), which the engine passes to the functions below and to its reads.

    The engine holds the store's transaction rather than the functions here each taking
    the store: a rule's states, their notifications and the reads they depend on must be
    one transaction under one lock, and only the store opens transactions.
    """
    return alert_ledger.locked_rule_transaction(store, rule)


def load_states(conn: StoreConnection, rule: str | None = None) -> list[StoredState]:
    """The stored states of ``rule`` (all rules when None), by rule and segment."""
    return [_stored(row) for row in alert_ledger.read_alert_states(conn, rule)]


def load_state(conn: StoreConnection, rule: str, segment: Segment) -> StoredState | None:
    """The stored state of one rule and segment (None: never evaluated), read alone."""
    rows = alert_ledger.read_alert_states(conn, rule, segment_key=segment.key)
    return _stored(rows[0]) if rows else None


def state_row(
    *, rule: str, segment: Segment, state: AlertState, at: datetime,
    finding: dict[str, Any], detector: dict[str, Any] | None = None,
) -> AlertStateRow:
    """The stored state of one rule and segment (and a sequential rule's detector
    states, ``detector``), for :func:`save_states`."""
    return AlertStateRow(
        rule=rule, segment_key=segment.key, segment=[list(pair) for pair in segment.labels],
        state=state.state, since=state.since, breaches=state.breaches, clears=state.clears,
        breach_started_at=state.breach_started_at, fired_at=state.fired_at,
        notified_at=state.notified_at, transitions=state.transitions,
        announced=state.announced, evaluated_at=at, finding=finding, detector=detector,
    )


def save_states(conn: StoreConnection, rows: list[AlertStateRow]) -> None:
    """Insert or replace the rows of :func:`state_row` (distinct segments), all at once:
    a cycle's segments cost one round trip, not one each."""
    alert_ledger.write_alert_states(conn, rows)


def transition_row(*, rule: str, segment: Segment, at: datetime, previous: str, state: str,
                   events: tuple[str, ...], finding: dict[str, Any]) -> dict[str, Any]:
    """One change of state (or notified event), as :func:`record_transitions` keeps it."""
    return {"rule": rule, "segment_key": segment.key, "at": at, "previous": previous,
            "state": state, "events": ",".join(events), "finding": finding}


def record_transitions(conn: StoreConnection, rows: list[dict[str, Any]]) -> None:
    """Keep a cycle's changes of state in the rule's history (rows of
    :func:`transition_row`, in order), all at once: a cycle where many segments change
    costs one round trip, not one each."""
    alert_ledger.insert_transitions(conn, rows)


#: How long the per-evaluation points are kept.
POINTS_KEPT = timedelta(days=2)


def record_points(conn: StoreConnection, *, rule: str, at: datetime,
                  points: list[dict[str, Any]]) -> None:
    """Keep this evaluation's numbers per segment (``segment_key``, ``n``, ``mean``,
    ``baseline_n``, ``baseline_mean``, ``state``) and drop the rule's points older than
    :data:`POINTS_KEPT`."""
    alert_ledger.keep_points(conn, rule=rule, at=at, points=points,
                             drop_before=at - POINTS_KEPT)


def open_exclusion(conn: StoreConnection, *, rule: str, segment: Segment,
                   started_at: datetime) -> None:
    """Start leaving the segment's samples from ``started_at`` on out of baselines."""
    alert_ledger.insert_exclusion(conn, rule=rule, segment_key=segment.key,
                                  segment=segment.as_dict(), started_at=started_at)


def close_exclusions(conn: StoreConnection, *, rule: str, segment: Segment,
                     ended_at: datetime) -> None:
    """End the segment's open exclusion periods at ``ended_at``."""
    alert_ledger.end_exclusions(conn, rule=rule, segment_key=segment.key, ended_at=ended_at)


def rebaseline(conn: StoreConnection, *, rule: str, segment: Segment | None = None) -> int:
    """Forget the rule's exclusion periods (of one segment, or all): every sample counts
    in the baseline again, so a firing segment is compared with what it does now.

    A segment's samples are also hidden by the periods of the segments above it (the
    whole rule's traffic fired too), so those are forgotten with it.

    Returns:
        How many periods were forgotten.
    """
    if segment is None:
        return alert_ledger.delete_exclusions(conn, rule=rule)
    keys = []
    current: Segment | None = segment
    while current is not None:
        keys.append(current.key)
        current = current.parent
    return alert_ledger.delete_exclusions(conn, rule=rule, segment_keys=keys)


def _stored(row: AlertStateRow) -> StoredState:
    segment = Segment(tuple((str(k), str(v)) for k, v in row.segment))
    state = AlertState(
        state=cast(StateName, row.state), since=row.since,  # as save_states wrote it
        breaches=row.breaches, clears=row.clears,
        breach_started_at=row.breach_started_at, fired_at=row.fired_at,
        notified_at=row.notified_at, transitions=row.transitions, announced=row.announced,
    )
    return StoredState(rule=row.rule, segment=segment, state=state,
                       evaluated_at=row.evaluated_at, finding=row.finding,
                       detector=row.detector)
