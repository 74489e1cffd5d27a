"""The alert notification outbox as the store keeps it: one row per notification and
receiver (``evalfleet.alerts.outbox`` says what is queued; ``evalfleet.alerts.delivery``
sends it and says how it went).

A notification is queued in the transaction of the state change it announces, so a change
is never lost nor queued twice; it is leased to one sender at a time (``FOR UPDATE SKIP
LOCKED`` on Postgres; SQLite has one writer at a time), and the rows of one rule, segment
and receiver are leased in order, so a ``resolved`` never overtakes its ``firing``.
Postgres and SQLite alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import DateTime, bindparam, text, update

from evalfleet.store.dialect import is_sqlite, upsert
from evalfleet.store.schema import JsonDocument, alert_notifications
from evalfleet.store.sql import SqlStore, StoreConnection, to_utc


@dataclass(frozen=True)
class Notification:
    """One queued notification for one receiver."""

    id: int
    """Row id."""
    idempotency_key: str
    """Sent as ``Idempotency-Key``; equal for every attempt of this notification."""
    rule: str
    """The rule."""
    receiver: str
    """The receiver's name."""
    kind: str
    """``firing``, ``resolved``, ``renotify``, ``no_data`` or ``data_back``."""
    alert: dict[str, Any]
    """The alert in Alertmanager's v2 shape, with its ``status``."""
    attempts: int
    """Delivery attempts made before this one."""
    created_at: datetime
    """When it was queued."""


def enqueue_notification(
    conn: StoreConnection, *, key: str, rule: str, segment_key: str, receiver: str, kind: str,
    alert: dict[str, Any], now: datetime,
) -> None:
    """Queue a notification due at ``now`` in ``conn``'s transaction (nothing happens if
    ``key`` is queued already)."""
    conn.execute(upsert(conn, alert_notifications).values(
        idempotency_key=key, rule=rule, segment_key=segment_key, receiver=receiver, kind=kind,
        alert=alert, created_at=now, attempts=0, next_attempt_at=now,
    ).on_conflict_do_nothing(index_elements=[alert_notifications.c.idempotency_key]))


def lease_due_notifications(store: SqlStore, *, now: datetime, lease_end: datetime,
                            limit: int) -> list[Notification]:
    """In one statement: take up to ``limit`` notifications due at ``now`` (not delivered,
    not given up, with no earlier one of their rule, segment and receiver pending), make
    them due again at ``lease_end`` so no other sender takes them meanwhile, and return
    them.

    Returns:
        The leased notifications, oldest first.
    """
    # SQLite has one writer at a time (transactions begin IMMEDIATE): no row locks needed.
    lock = "" if is_sqlite(store.engine) else " FOR UPDATE SKIP LOCKED"
    statement = text(
        "UPDATE alert_notifications SET next_attempt_at = :lease_end"
        " WHERE id IN (SELECT n.id FROM alert_notifications n"
        "  WHERE n.delivered_at IS NULL AND n.failed_at IS NULL AND n.next_attempt_at <= :now"
        "  AND NOT EXISTS (SELECT 1 FROM alert_notifications e WHERE e.rule = n.rule"
        "   AND e.segment_key = n.segment_key AND e.receiver = n.receiver AND e.id < n.id"
        "   AND e.delivered_at IS NULL AND e.failed_at IS NULL)"
        f"  ORDER BY n.id LIMIT :limit{lock})"
        " RETURNING id, idempotency_key, rule, receiver, kind, alert, attempts, created_at",
    ).bindparams(
        # Typed, so SQLite gets times in the text form it stores them in: untyped, ``now``
        # bound as '... 12:00:00+00:00', which sorts before the stored
        # '... 12:00:00.000000', and a notification queued at ``now`` was not due at ``now``.
        bindparam("now", type_=DateTime(timezone=True)),
        bindparam("lease_end", type_=DateTime(timezone=True)),
    ).columns(alert=JsonDocument, created_at=DateTime(timezone=True))
    params = {"now": to_utc(now), "lease_end": to_utc(lease_end), "limit": limit}
    with store.begin() as conn:
        rows = conn.execute(statement, params).mappings().all()
    return sorted((Notification(
        id=row["id"], idempotency_key=row["idempotency_key"], rule=row["rule"],
        receiver=row["receiver"], kind=row["kind"], alert=row["alert"],
        attempts=row["attempts"], created_at=to_utc(row["created_at"]),
    ) for row in rows), key=lambda item: item.id)


def mark_delivered(store: SqlStore, notification_id: int, *, attempts: int,
                   now: datetime) -> None:
    """Record that the receiver accepted the notification after ``attempts`` in all."""
    _set(store, notification_id, attempts=attempts, delivered_at=now, last_error=None)


def mark_retry(store: SqlStore, notification_id: int, *, attempts: int,
               next_attempt_at: datetime, error: str) -> None:
    """Record failed attempts; the notification is due again at ``next_attempt_at``."""
    _set(store, notification_id, attempts=attempts, next_attempt_at=next_attempt_at,
         last_error=error)


def mark_failed(store: SqlStore, notification_id: int, *, attempts: int, now: datetime,
                error: str) -> None:
    """Record that the notification was given up at ``now`` (never due again)."""
    _set(store, notification_id, attempts=attempts, failed_at=now, last_error=error)


def _set(store: SqlStore, notification_id: int, **values: Any) -> None:
    with store.begin() as conn:
        conn.execute(update(alert_notifications)
                     .where(alert_notifications.c.id == notification_id).values(**values))
