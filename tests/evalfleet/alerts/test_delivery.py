"""Delivering the outbox over real HTTP, on Postgres and SQLite: retries with backoff, one
delivery, idempotency keys."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import select

from evalfleet.alerts import outbox
from evalfleet.alerts.delivery import DeliveryOptions, Dispatcher
from evalfleet.alerts.notifier import AlertmanagerNotifier
from evalfleet.store import SqlStore
from evalfleet.store.schema import alert_notifications
from tests.evalfleet.alerts.receiver import Receiver

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
ALERT = {"status": "firing", "labels": {"alertname": "drop", "app": "bot"},
         "annotations": {"summary": "dropped"}, "startsAt": "2026-11-21T12:00:00Z",
         "endsAt": "2026-11-21T16:00:00Z", "generatorURL": "http://grafana/d/x"}


def queue(store: SqlStore, *, sequence: int = 1, kind: str = "firing",
          receiver: str = "am") -> str:
    key = outbox.idempotency_key(rule="drop", segment_key="s", sequence=sequence,
                                 receiver=receiver)
    with store.begin() as conn:
        outbox.enqueue(conn, key=key, rule="drop", segment_key="s", receiver=receiver,
                       kind=kind, alert={**ALERT, "status": "resolved" if kind == "resolved"
                                         else "firing"}, now=NOW)
    return key


def dispatcher(store: SqlStore, receiver: Receiver, *, attempts: int = 4,
               clock: Any = None) -> Dispatcher:
    notifier = AlertmanagerNotifier(name="am", url=receiver.url, client=httpx.Client(timeout=5))
    return Dispatcher(store=store, notifiers={"am": notifier},
                      options=DeliveryOptions(attempts=attempts, retry_base_s=0.01,
                                              retry_max_s=0.05, timeout_s=10.0),
                      clock=clock or (lambda: NOW))


def rows(store: SqlStore) -> list[Any]:
    with store.connect() as conn:
        return list(conn.execute(select(alert_notifications).order_by(alert_notifications.c.id)))


def test_a_webhook_failing_three_times_then_succeeding_delivers_once(
    any_store: SqlStore, receiver: Receiver,
) -> None:
    key = queue(any_store)
    receiver.fail_first = 3
    sender = dispatcher(any_store, receiver)
    report = sender.deliver_due()
    assert report.delivered == {"am": 1}
    assert [r.status for r in receiver.requests] == [503, 503, 503, 200]
    assert {r.headers["idempotency-key"] for r in receiver.requests} == {key}
    assert sender.deliver_due().delivered == {}  # nothing is sent twice
    assert len(receiver.accepted) == 1
    (row,) = rows(any_store)
    assert row.delivered_at is not None and row.attempts == 4 and row.last_error is None


def test_a_receiver_still_down_keeps_the_notification_for_a_later_cycle(
    any_store: SqlStore, receiver: Receiver,
) -> None:
    queue(any_store)
    receiver.fail_first = 4
    assert dispatcher(any_store, receiver, attempts=2).deliver_due().retrying == {"am": 1}
    (row,) = rows(any_store)
    assert row.delivered_at is None and row.attempts == 2 and "HTTP 503" in row.last_error
    later = dispatcher(any_store, receiver, attempts=4, clock=lambda: NOW + timedelta(hours=1))
    assert later.deliver_due().delivered == {"am": 1}
    assert len(receiver.accepted) == 1 and len(receiver.requests) == 5


def test_a_rejected_notification_is_given_up_at_once(any_store: SqlStore,
                                                     receiver: Receiver) -> None:
    queue(any_store)
    receiver.fail_first, receiver.fail_status = 1, 400
    assert dispatcher(any_store, receiver).deliver_due().failed == {"am": 1}
    assert len(receiver.requests) == 1
    (row,) = rows(any_store)
    assert row.failed_at is not None and "HTTP 400" in row.last_error


def test_a_resolved_never_overtakes_its_firing(any_store: SqlStore, receiver: Receiver) -> None:
    queue(any_store, sequence=1, kind="firing")
    queue(any_store, sequence=2, kind="resolved")
    receiver.fail_first = 10
    dispatcher(any_store, receiver, attempts=1).deliver_due()
    assert len(receiver.requests) == 1  # only the firing was tried
    receiver.fail_first = 0
    later = dispatcher(any_store, receiver, clock=lambda: NOW + timedelta(hours=1))
    later.deliver_due()
    later.deliver_due()
    assert [a["endsAt"] for a in receiver.alerts()] == [ALERT["endsAt"], ALERT["endsAt"]]
    assert [r.headers["idempotency-key"] for r in receiver.accepted] == [
        outbox.idempotency_key(rule="drop", segment_key="s", sequence=n, receiver="am")
        for n in (1, 2)]


def test_an_unknown_receiver_is_given_up(any_store: SqlStore, receiver: Receiver) -> None:
    queue(any_store, receiver="gone")
    assert dispatcher(any_store, receiver).deliver_due().failed == {"gone": 1}


def test_queueing_the_same_key_twice_keeps_one(any_store: SqlStore) -> None:
    queue(any_store)
    queue(any_store)
    assert len(rows(any_store)) == 1
