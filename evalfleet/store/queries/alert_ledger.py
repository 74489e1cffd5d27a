"""What the alert engine remembers between cycles: the cycle slot each rule last ran in,
the state of each rule and segment, its history of changes, its points, and the periods
its baselines leave out (``evalfleet.alerts.ledger`` decides what to write and when).

A rule's states are read and written in one transaction under a lock on the rule
(:func:`locked_rule_transaction`): the caller passes that transaction to each function
here that takes a :data:`~evalfleet.store.sql.StoreConnection`. Postgres and SQLite alike.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from sqlalchemy import case, delete, select, text, update

from evalfleet.store.dialect import is_sqlite, upsert
from evalfleet.store.schema import (
    alert_exclusions,
    alert_points,
    alert_rule_runs,
    alert_states,
    alert_transitions,
)
from evalfleet.store.sql import SqlStore, StoreConnection, json_default, to_utc


@dataclass(frozen=True)
class AlertStateRow:
    """One rule and segment's ``alert_states`` row, times in UTC when read."""

    rule: str
    segment_key: str
    segment: list[list[str]]
    """The segment's ``[key, value]`` pairs."""
    state: str
    since: datetime
    breaches: int
    clears: int
    breach_started_at: datetime | None
    fired_at: datetime | None
    notified_at: datetime | None
    transitions: int
    announced: bool
    evaluated_at: datetime
    finding: dict[str, Any]
    """The numbers of the last evaluation."""
    detector: dict[str, Any] | None
    """A sequential rule's detector states; None for other rules."""


def claim_rule_slot(store: SqlStore, *, rule: str, slot: int, at: datetime) -> bool:
    """Record, in its own transaction, that ``rule`` runs in cycle ``slot`` at ``at``.

    One upsert that changes the row only when its slot differs, so of two evaluators
    claiming the same slot at once exactly one gets the row back.

    Returns:
        True if this caller recorded the slot; False if it was recorded already.
    """
    statement = (
        upsert(store.engine, alert_rule_runs).values(rule=rule, slot=slot, evaluated_at=at)
        .on_conflict_do_update(
            index_elements=[alert_rule_runs.c.rule],
            set_={"slot": slot, "evaluated_at": at},
            where=alert_rule_runs.c.slot != slot,
        )
        .returning(alert_rule_runs.c.rule)
    )
    with store.begin() as conn:
        return conn.execute(statement).first() is not None


@contextmanager
def locked_rule_transaction(store: SqlStore, rule: str) -> Iterator[StoreConnection]:
    """A transaction holding a lock on ``rule`` until it ends.

    On Postgres a transaction-scoped advisory lock on a hash of the name; on SQLite the
    store's transactions begin ``IMMEDIATE``: each holds the database's one write lock
    from its start, which serialises evaluators all the same.
    """
    digest = hashlib.sha256(rule.encode("utf-8")).digest()
    lock_id = int.from_bytes(digest[:8], "big", signed=True)
    with store.begin() as conn:
        if not is_sqlite(conn):
            conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": lock_id})
        yield conn


def read_alert_states(conn: StoreConnection, rule: str | None = None, *,
                      segment_key: str | None = None) -> list[AlertStateRow]:
    """The stored states of ``rule`` (all rules when None; of one segment with
    ``segment_key``), by rule and segment key."""
    query = select(alert_states).order_by(alert_states.c.rule, alert_states.c.segment_key)
    if rule is not None:
        query = query.where(alert_states.c.rule == rule)
    if segment_key is not None:
        query = query.where(alert_states.c.segment_key == segment_key)
    return [_state_row(row) for row in conn.execute(query).mappings()]


def write_alert_states(conn: StoreConnection, rows: Sequence[AlertStateRow]) -> None:
    """Insert or replace ``rows`` (distinct segments), all in one statement: a cycle's
    segments cost one round trip, not one each.

    On Postgres the rows travel as one JSON document unpacked by ``jsonb_to_recordset``
    (one statement executed once, where an ``executemany`` runs the upsert once per row);
    on SQLite as an ``executemany``.
    """
    if not rows:
        return
    values = [{f.name: getattr(row, f.name) for f in fields(AlertStateRow)} for row in rows]
    if not is_sqlite(conn):
        conn.execute(text(
            f"INSERT INTO alert_states ({_STATE_COLUMNS}) SELECT {_STATE_VALUES}"
            f" FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r({_STATE_TYPES})"
            " ON CONFLICT (rule, segment_key) DO UPDATE SET "
            + ", ".join(f"{name} = excluded.{name}" for name in values[0]
                        if name not in ("rule", "segment_key"))),
            {"rows": _json_rows(values)})
        return
    statement = upsert(conn, alert_states)
    replaced = {name: statement.excluded[name] for name in values[0]
                if name not in ("rule", "segment_key")}
    conn.execute(statement.on_conflict_do_update(
        index_elements=[alert_states.c.rule, alert_states.c.segment_key], set_=replaced,
    ), values)


def insert_transitions(conn: StoreConnection, rows: Sequence[dict[str, Any]]) -> None:
    """Append changes of state to the rules' history (``alert_transitions`` columns), in
    order and in one statement: a cycle where many segments change costs one round trip."""
    if rows:
        conn.execute(alert_transitions.insert(), list(rows))


def keep_points(conn: StoreConnection, *, rule: str, at: datetime,
                points: Sequence[dict[str, Any]], drop_before: datetime) -> None:
    """Store an evaluation's points of ``rule`` at ``at`` (``alert_points`` columns but
    rule and time; a point stored already stays) and delete the rule's points older
    than ``drop_before`` (Postgres: one statement, the points as one JSON document)."""
    if points and not is_sqlite(conn) and all(
            math.isfinite(value) for point in points for value in point.values()
            if isinstance(value, float)):  # a NaN is a float column's, not JSON's
        conn.execute(text(
            "WITH dropped AS (DELETE FROM alert_points WHERE rule = :rule AND at < :before)"
            f" INSERT INTO alert_points ({_POINT_COLUMNS}) SELECT {_POINT_COLUMNS}"
            f" FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r({_POINT_TYPES})"
            " ON CONFLICT DO NOTHING"),
            {"rule": rule, "before": drop_before,
             "rows": _json_rows([{"rule": rule, "at": at, **point} for point in points])})
        return
    if points:
        conn.execute(upsert(conn, alert_points).on_conflict_do_nothing(),
                     [{"rule": rule, "at": at, **point} for point in points])
    conn.execute(delete(alert_points).where(alert_points.c.rule == rule,
                                            alert_points.c.at < drop_before))


def insert_exclusion(conn: StoreConnection, *, rule: str, segment_key: str,
                     segment: dict[str, str], started_at: datetime) -> None:
    """Open a period of the segment's samples that its rule's baselines leave out."""
    conn.execute(alert_exclusions.insert().values(
        rule=rule, segment_key=segment_key, segment=segment, started_at=started_at,
    ))


def end_exclusions(conn: StoreConnection, *, rule: str, segment_key: str,
                   ended_at: datetime) -> None:
    """End the segment's open exclusion periods at ``ended_at``, or where a period
    started if that is later (a period never ends before it starts)."""
    e = alert_exclusions.c
    conn.execute(
        update(alert_exclusions)
        .where(e.rule == rule, e.segment_key == segment_key, e.ended_at.is_(None))
        .values(ended_at=case((e.started_at > ended_at, e.started_at), else_=ended_at)),
    )


def delete_exclusions(conn: StoreConnection, *, rule: str,
                      segment_keys: Sequence[str] | None = None) -> int:
    """Delete the rule's exclusion periods, of the segments ``segment_keys`` (None: all).

    Returns:
        How many were deleted.
    """
    statement = delete(alert_exclusions).where(alert_exclusions.c.rule == rule)
    if segment_keys is not None:
        statement = statement.where(alert_exclusions.c.segment_key.in_(list(segment_keys)))
    return int(conn.execute(statement).rowcount)


#: ``alert_states``' columns and their Postgres types, for ``jsonb_to_recordset``.
_STATE_TYPED = (("rule", "text"), ("segment_key", "text"), ("segment", "jsonb"),
                ("state", "text"), ("since", "timestamptz"), ("breaches", "integer"),
                ("clears", "integer"), ("breach_started_at", "timestamptz"),
                ("fired_at", "timestamptz"), ("notified_at", "timestamptz"),
                ("transitions", "integer"), ("announced", "boolean"),
                ("evaluated_at", "timestamptz"), ("finding", "jsonb"), ("detector", "jsonb"))
_STATE_COLUMNS = ", ".join(name for name, _ in _STATE_TYPED)
_STATE_TYPES = ", ".join(f"{name} {kind}" for name, kind in _STATE_TYPED)
# A JSON null comes out of jsonb_to_recordset as SQL NULL; the executemany stored the
# JSON null SQLAlchemy writes for None (a fixed-test rule's detector), so this does too.
_STATE_VALUES = ", ".join(f"coalesce({name}, 'null'::jsonb)" if kind == "jsonb" else name
                          for name, kind in _STATE_TYPED)

#: ``alert_points``' columns and their Postgres types.
_POINT_TYPED = (("rule", "text"), ("segment_key", "text"), ("at", "timestamptz"),
                ("n", "integer"), ("mean", "double precision"), ("baseline_n", "integer"),
                ("baseline_mean", "double precision"), ("state", "text"))
_POINT_COLUMNS = ", ".join(name for name, _ in _POINT_TYPED)
_POINT_TYPES = ", ".join(f"{name} {kind}" for name, kind in _POINT_TYPED)


def _json_rows(rows: list[dict[str, Any]]) -> str:
    """Rows as one JSON array for ``jsonb_to_recordset`` (times as ISO 8601 with their
    offset, which ``timestamptz`` reads back exactly)."""
    return json.dumps(rows, default=json_default)


def _state_row(row: Any) -> AlertStateRow:
    values = {f.name: row.get(f.name) for f in fields(AlertStateRow)}
    for name in ("since", "breach_started_at", "fired_at", "notified_at", "evaluated_at"):
        if values[name] is not None:
            values[name] = to_utc(values[name])
    return AlertStateRow(**values)
