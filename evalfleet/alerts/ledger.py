"""What the alert engine remembers in Postgres: cycles run, states, baseline exclusions.

Several evaluators may run at once (two beats, a cron ``alerts check`` beside the
beat). Two mechanisms keep them from notifying twice:

- a rule is evaluated once per cycle slot (``floor(time / interval)``): the
  evaluator that records the slot first evaluates it, the others skip;
- the states of a rule are read, advanced and written, and their notifications
  queued, in one transaction under an advisory lock on the rule, so even
  overlapping cycles see each other's states and never queue one transition twice.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, case, delete, select, text, update
from sqlalchemy.engine import Connection

from evalfleet.alerts.segment import Segment
from evalfleet.alerts.state import AlertState
from evalfleet.store.dialect import is_sqlite, upsert
from evalfleet.store.schema import (
    alert_exclusions,
    alert_points,
    alert_rule_runs,
    alert_states,
    alert_transitions,
)
from evalfleet.store.sql import to_utc


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


def claim_slot(engine: Engine, *, rule: str, slot: int, at: datetime) -> bool:
    """Record that this evaluator runs ``rule`` in cycle ``slot``.

    Args:
        engine: The database.
        rule: The rule's name.
        slot: The cycle number, ``floor(at / interval)``.
        at: The evaluation time.

    Returns:
        True if this evaluator should evaluate; False if another already did.
    """
    statement = (
        upsert(engine, alert_rule_runs).values(rule=rule, slot=slot, evaluated_at=at)
        .on_conflict_do_update(
            index_elements=[alert_rule_runs.c.rule],
            set_={"slot": slot, "evaluated_at": at},
            where=alert_rule_runs.c.slot != slot,
        )
        .returning(alert_rule_runs.c.rule)
    )
    with engine.begin() as conn:
        return conn.execute(statement).first() is not None


@contextmanager
def rule_transaction(engine: Engine, rule: str) -> Iterator[Connection]:
    """A transaction holding the rule's advisory lock until it ends.

    On SQLite the store's transactions begin ``IMMEDIATE``: each holds the database's
    one write lock from its start, which serialises evaluators all the same.
    """
    digest = hashlib.sha256(rule.encode("utf-8")).digest()
    lock_id = int.from_bytes(digest[:8], "big", signed=True)
    with engine.begin() as conn:
        if not is_sqlite(conn):
            conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": lock_id})
        yield conn


def load_states(conn: Connection, rule: str | None = None) -> list[StoredState]:
    """The stored states of ``rule`` (all rules when None), by rule and segment."""
    query = select(alert_states).order_by(alert_states.c.rule, alert_states.c.segment_key)
    if rule is not None:
        query = query.where(alert_states.c.rule == rule)
    return [_stored(row) for row in conn.execute(query).mappings()]


def state_row(
    *, rule: str, segment: Segment, state: AlertState, at: datetime,
    finding: dict[str, Any], detector: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``alert_states`` row of one rule and segment (and a sequential rule's detector
    states, ``detector``), for :func:`save_states`."""
    return {
        "rule": rule, "segment_key": segment.key,
        "state": state.state, "since": state.since, "breaches": state.breaches,
        "clears": state.clears, "breach_started_at": state.breach_started_at,
        "fired_at": state.fired_at, "notified_at": state.notified_at,
        "transitions": state.transitions, "announced": state.announced,
        "evaluated_at": at, "finding": finding, "detector": detector,
        "segment": [list(pair) for pair in segment.labels],
    }


def save_states(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Insert or replace the rows of :func:`state_row` (distinct segments), all in one
    statement: a cycle's segments cost one round trip, not one each."""
    if not rows:
        return
    statement = upsert(conn, alert_states)
    replaced = {name: statement.excluded[name] for name in rows[0]
                if name not in ("rule", "segment_key")}
    conn.execute(statement.on_conflict_do_update(
        index_elements=[alert_states.c.rule, alert_states.c.segment_key], set_=replaced,
    ), rows)


def transition_row(*, rule: str, segment: Segment, at: datetime, previous: str, state: str,
                   events: tuple[str, ...], finding: dict[str, Any]) -> dict[str, Any]:
    """One change of state (or notified event), as :func:`record_transitions` keeps it."""
    return {"rule": rule, "segment_key": segment.key, "at": at, "previous": previous,
            "state": state, "events": ",".join(events), "finding": finding}


def record_transitions(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Keep a cycle's changes of state in the rule's history (rows of
    :func:`transition_row`, in order), all in one statement: a cycle where many segments
    change costs one round trip, not one each."""
    if rows:
        conn.execute(alert_transitions.insert(), rows)


#: How long the per-evaluation points are kept.
POINTS_KEPT = timedelta(days=2)


def record_points(conn: Connection, *, rule: str, at: datetime,
                  points: list[dict[str, Any]]) -> None:
    """Keep this evaluation's numbers per segment (``segment_key``, ``n``, ``mean``,
    ``baseline_n``, ``baseline_mean``, ``state``) and drop the rule's points older than
    :data:`POINTS_KEPT`."""
    if points:
        conn.execute(upsert(conn, alert_points).on_conflict_do_nothing(),
                     [{"rule": rule, "at": at, **point} for point in points])
    conn.execute(delete(alert_points).where(alert_points.c.rule == rule,
                                            alert_points.c.at < at - POINTS_KEPT))


def open_exclusion(conn: Connection, *, rule: str, segment: Segment,
                   started_at: datetime) -> None:
    """Start leaving the segment's samples from ``started_at`` on out of baselines."""
    conn.execute(alert_exclusions.insert().values(
        rule=rule, segment_key=segment.key, segment=segment.as_dict(), started_at=started_at,
    ))


def close_exclusions(conn: Connection, *, rule: str, segment: Segment,
                     ended_at: datetime) -> None:
    """End the segment's open exclusion periods at ``ended_at``."""
    conn.execute(
        update(alert_exclusions)
        .where(alert_exclusions.c.rule == rule, alert_exclusions.c.segment_key == segment.key,
               alert_exclusions.c.ended_at.is_(None))
        .values(ended_at=case((alert_exclusions.c.started_at > ended_at,
                               alert_exclusions.c.started_at), else_=ended_at)),
    )


def rebaseline(conn: Connection, *, rule: str, segment: Segment | None = None) -> int:
    """Forget the rule's exclusion periods (of one segment, or all): every sample counts
    in the baseline again, so a firing segment is compared with what it does now.

    A segment's samples are also hidden by the periods of the segments above it (the
    whole rule's traffic fired too), so those are forgotten with it.

    Returns:
        How many periods were forgotten.
    """
    statement = delete(alert_exclusions).where(alert_exclusions.c.rule == rule)
    if segment is not None:
        keys = []
        current: Segment | None = segment
        while current is not None:
            keys.append(current.key)
            current = current.parent
        statement = statement.where(alert_exclusions.c.segment_key.in_(keys))
    return int(conn.execute(statement).rowcount)


def _stored(row: Any) -> StoredState:
    segment = Segment(tuple((str(k), str(v)) for k, v in row["segment"]))
    state = AlertState(
        state=row["state"], since=to_utc(row["since"]), breaches=row["breaches"],
        clears=row["clears"], breach_started_at=_utc(row["breach_started_at"]),
        fired_at=_utc(row["fired_at"]), notified_at=_utc(row["notified_at"]),
        transitions=row["transitions"], announced=row["announced"],
    )
    return StoredState(rule=row["rule"], segment=segment, state=state,
                       evaluated_at=to_utc(row["evaluated_at"]), finding=row["finding"],
                       detector=row.get("detector"))


def _utc(moment: datetime | None) -> datetime | None:
    return to_utc(moment) if moment is not None else None
