"""The generic webhook: Alertmanager's v4 payload, HMAC signature a receiver can verify."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx

from evalfleet.alerts.notifier import WebhookNotifier, sign, verify_signature
from evalfleet.alerts.notifier.webhook import ZERO_TIME, fingerprint
from evalfleet.alerts.outbox import Notification
from tests.evalfleet.alerts.receiver import Receiver

ALERT = {"status": "firing", "labels": {"alertname": "drop", "severity": "page"},
         "annotations": {"summary": "dropped", "window_mean": "0.71"},
         "startsAt": "2026-11-21T12:00:00Z", "endsAt": "2026-11-21T16:00:00Z",
         "generatorURL": "http://grafana/d/x?var-rule=drop"}


def notification(**alert: object) -> Notification:
    return Notification(id=1, idempotency_key="k1", rule="drop", receiver="hook", kind="firing",
                        alert={**ALERT, **alert}, attempts=0,
                        created_at=datetime(2026, 11, 21, tzinfo=UTC))


def test_payload_is_alertmanagers_v4_webhook_and_the_signature_verifies(
    receiver: Receiver,
) -> None:
    notifier = WebhookNotifier(name="hook", url=receiver.url + "/hook",
                               client=httpx.Client(timeout=5), secret="s3cret",
                               external_url="http://grafana", clock=lambda: 1_800_000_000)
    notifier.send(notification())
    (request,) = receiver.requests
    body = request.json
    assert body["version"] == "4" and body["status"] == "firing" and body["receiver"] == "hook"
    assert body["groupLabels"] == {"alertname": "drop"}
    assert body["commonLabels"] == ALERT["labels"] and body["externalURL"] == "http://grafana"
    (alert,) = body["alerts"]
    assert alert["endsAt"] == ZERO_TIME and alert["fingerprint"] == fingerprint(ALERT["labels"])
    assert request.headers["idempotency-key"] == "k1"
    timestamp = request.headers["x-evalfleet-timestamp"]
    signature = request.headers["x-evalfleet-signature"]
    assert signature == sign(b"s3cret", timestamp=timestamp, body=request.body)
    assert verify_signature(b"s3cret", timestamp=timestamp, body=request.body,
                            signature=signature, now_s=1_800_000_010)
    assert not verify_signature(b"other", timestamp=timestamp, body=request.body,
                                signature=signature, now_s=1_800_000_010)
    assert not verify_signature(b"s3cret", timestamp=timestamp, body=request.body + b" ",
                                signature=signature, now_s=1_800_000_010)
    assert not verify_signature(b"s3cret", timestamp=timestamp, body=request.body,
                                signature=signature, now_s=1_800_009_999)  # replayed late


def test_resolved_alerts_carry_their_end(receiver: Receiver) -> None:
    notifier = WebhookNotifier(name="hook", url=receiver.url, client=httpx.Client(timeout=5),
                               secret="s", external_url="http://grafana")
    notifier.send(notification(status="resolved", endsAt="2026-11-21T13:00:00Z"))
    body = receiver.requests[0].json
    assert body["status"] == "resolved"
    assert body["alerts"][0]["endsAt"] == "2026-11-21T13:00:00Z"
