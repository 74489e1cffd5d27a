"""The notification outbox: one row per notification and receiver, in Postgres.

A state transition and its notifications are written in the same transaction,
so a transition is never lost nor queued twice. Delivery takes due rows with a
lease (``FOR UPDATE SKIP LOCKED``), so two evaluators never send the same row at
once; a crash mid-delivery leaves the row to be sent again after the lease, with
the same idempotency key. Rows of one rule, segment and receiver go out in
order: a ``resolved`` never overtakes its ``firing``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import DateTime, Engine, func, select, text, update
from sqlalchemy.engine import Connection

from evalfleet.store.dialect import is_sqlite, upsert
from evalfleet.store.schema import JsonDocument, alert_notifications
from evalfleet.store.sql import to_utc


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


def idempotency_key(*, rule: str, segment_key: str, sequence: int, receiver: str) -> str:
    """The key of the ``sequence``-th notification of a rule and segment to a receiver."""
    text_key = "\x1f".join((rule, segment_key, str(sequence), receiver))
    return hashlib.sha256(text_key.encode("utf-8")).hexdigest()


def enqueue(
    conn: Connection, *, key: str, rule: str, segment_key: str, receiver: str, kind: str,
    alert: dict[str, Any], now: datetime,
) -> None:
    """Queue a notification (nothing happens if the key is already queued)."""
    conn.execute(upsert(conn, alert_notifications).values(
        idempotency_key=key, rule=rule, segment_key=segment_key, receiver=receiver, kind=kind,
        alert=alert, created_at=now, attempts=0, next_attempt_at=now,
    ).on_conflict_do_nothing(index_elements=[alert_notifications.c.idempotency_key]))


def take_due(engine: Engine, *, now: datetime, lease_s: float,
             limit: int = 100) -> list[Notification]:
    """Lease the notifications due at ``now`` for ``lease_s`` seconds and return them.

    Args:
        engine: The database.
        now: The current time.
        lease_s: How long others leave them alone.
        limit: Most rows taken.

    Returns:
        The leased notifications, oldest first.
    """
    # SQLite has one writer at a time (transactions begin IMMEDIATE): no row locks needed.
    lock = "" if is_sqlite(engine) else " FOR UPDATE SKIP LOCKED"
    statement = text(
        "UPDATE alert_notifications SET next_attempt_at = :lease_end"
        " WHERE id IN (SELECT n.id FROM alert_notifications n"
        "  WHERE n.delivered_at IS NULL AND n.failed_at IS NULL AND n.next_attempt_at <= :now"
        "  AND NOT EXISTS (SELECT 1 FROM alert_notifications e WHERE e.rule = n.rule"
        "   AND e.segment_key = n.segment_key AND e.receiver = n.receiver AND e.id < n.id"
        "   AND e.delivered_at IS NULL AND e.failed_at IS NULL)"
        f"  ORDER BY n.id LIMIT :limit{lock})"
        " RETURNING id, idempotency_key, rule, receiver, kind, alert, attempts, created_at",
    ).columns(alert=JsonDocument, created_at=DateTime(timezone=True))
    params = {"now": to_utc(now), "lease_end": to_utc(now + timedelta(seconds=lease_s)),
              "limit": limit}
    with engine.begin() as conn:
        rows = conn.execute(statement, params).mappings().all()
    return sorted((Notification(
        id=row["id"], idempotency_key=row["idempotency_key"], rule=row["rule"],
        receiver=row["receiver"], kind=row["kind"], alert=row["alert"],
        attempts=row["attempts"], created_at=to_utc(row["created_at"]),
    ) for row in rows), key=lambda item: item.id)


def mark_delivered(engine: Engine, notification_id: int, *, attempts: int,
                   now: datetime) -> None:
    """Record a delivery."""
    _set(engine, notification_id, attempts=attempts, delivered_at=now, last_error=None)


def mark_retry(engine: Engine, notification_id: int, *, attempts: int,
               next_attempt_at: datetime, error: str) -> None:
    """Record failed attempts; the notification is due again at ``next_attempt_at``."""
    _set(engine, notification_id, attempts=attempts, next_attempt_at=next_attempt_at,
         last_error=error)


def mark_failed(engine: Engine, notification_id: int, *, attempts: int, now: datetime,
                error: str) -> None:
    """Give up on a notification the receiver rejected."""
    _set(engine, notification_id, attempts=attempts, failed_at=now, last_error=error)


def count_undelivered(conn: Connection) -> int:
    """Notifications neither delivered nor given up."""
    query = select(func.count()).select_from(alert_notifications).where(
        alert_notifications.c.delivered_at.is_(None), alert_notifications.c.failed_at.is_(None),
    )
    return int(conn.execute(query).scalar_one())


def _set(engine: Engine, notification_id: int, **values: Any) -> None:
    with engine.begin() as conn:
        conn.execute(update(alert_notifications)
                     .where(alert_notifications.c.id == notification_id).values(**values))
