"""The notification outbox: one row per notification and receiver, in the store.

A state transition and its notifications are written in the same transaction,
so a transition is never lost nor queued twice. Delivery takes due rows with a
lease (``FOR UPDATE SKIP LOCKED``), so two evaluators never send the same row at
once; a crash mid-delivery leaves the row to be sent again after the lease, with
the same idempotency key. Rows of one rule, segment and receiver go out in
order: a ``resolved`` never overtakes its ``firing``.

The rows are written, leased and marked by ``evalfleet.store.queries.alert_outbox``; this
module names each notification (its idempotency key) and sizes the lease.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Any

from evalfleet.store import SqlStore, StoreConnection
from evalfleet.store.queries.alert_outbox import (
    Notification,
    enqueue_notification,
    lease_due_notifications,
    mark_delivered,
    mark_failed,
    mark_retry,
)

__all__ = [
    "Notification", "enqueue", "idempotency_key", "mark_delivered",
    "mark_failed", "mark_retry", "take_due",
]


def idempotency_key(*, rule: str, segment_key: str, sequence: int, receiver: str) -> str:
    """The key of the ``sequence``-th notification of a rule and segment to a receiver."""
    text_key = "\x1f".join((rule, segment_key, str(sequence), receiver))
    return hashlib.sha256(text_key.encode("utf-8")).hexdigest()


def enqueue(
    conn: StoreConnection, *, key: str, rule: str, segment_key: str, receiver: str, kind: str,
    alert: dict[str, Any], now: datetime,
) -> None:
    """Queue a notification in the transaction of the change it announces (nothing
    happens if the key is already queued)."""
    enqueue_notification(conn, key=key, rule=rule, segment_key=segment_key,
                         receiver=receiver, kind=kind, alert=alert, now=now)


def take_due(store: SqlStore, *, now: datetime, lease_s: float,
             limit: int = 100) -> list[Notification]:
    """Lease the notifications due at ``now`` for ``lease_s`` seconds and return them.

    Args:
        store: The verdict store.
        now: The current time.
        lease_s: How long others leave them alone.
        limit: Most rows taken.

    Returns:
        The leased notifications, oldest first.
    """
    return lease_due_notifications(store, now=now, lease_end=now + timedelta(seconds=lease_s),
                                   limit=limit)
