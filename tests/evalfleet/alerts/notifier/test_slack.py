"""Slack-compatible incoming webhooks: a fallback text and formatted blocks."""

from __future__ import annotations

import httpx

from evalfleet.alerts.notifier import SlackNotifier
from tests.evalfleet.alerts.notifier.test_webhook import notification
from tests.evalfleet.alerts.receiver import Receiver


def test_message_has_a_title_a_description_and_the_labels(receiver: Receiver) -> None:
    SlackNotifier(name="chat", url=receiver.url + "/services/x",
                  client=httpx.Client(timeout=5)).send(notification())
    (request,) = receiver.requests
    message = request.json
    assert message["text"] == "[FIRING] dropped"
    section, context = message["blocks"]
    assert "*[FIRING] dropped*" in section["text"]["text"]
    assert "<http://grafana/d/x?var-rule=drop|Open the alert>" in section["text"]["text"]
    assert context["elements"][0]["text"] == "alertname=drop, severity=page"
    assert request.headers["idempotency-key"] == "k1"
