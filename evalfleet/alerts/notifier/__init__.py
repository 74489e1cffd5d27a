"""Alert receivers: Alertmanager's v2 API, a signed generic webhook, Slack."""

from __future__ import annotations

import httpx

from evalfleet.alerts.notifier.alertmanager import AlertmanagerNotifier
from evalfleet.alerts.notifier.base import Notifier
from evalfleet.alerts.notifier.slack import SlackNotifier
from evalfleet.alerts.notifier.webhook import WebhookNotifier, sign, verify_signature
from evalfleet.alerts.rule import ReceiverSpec
from evalfleet.core.errors import InvalidAlertRule

__all__ = [
    "AlertmanagerNotifier",
    "Notifier",
    "SlackNotifier",
    "WebhookNotifier",
    "build_notifiers",
    "sign",
    "verify_signature",
]


def build_notifiers(
    receivers: dict[str, ReceiverSpec], *, timeout_s: float, webhook_secret: str | None,
    external_url: str,
) -> dict[str, Notifier]:
    """One notifier per configured receiver.

    Args:
        receivers: Receivers by name.
        timeout_s: Timeout of one HTTP request.
        webhook_secret: HMAC key for ``webhook`` receivers.
        external_url: Sent as the webhook's ``externalURL``.

    Returns:
        Notifiers by receiver name.

    Raises:
        InvalidAlertRule: When a webhook receiver is configured without a secret.
    """
    notifiers: dict[str, Notifier] = {}
    for name, spec in receivers.items():
        client = httpx.Client(timeout=timeout_s)
        if spec.type == "alertmanager":
            notifiers[name] = AlertmanagerNotifier(name=name, url=spec.url, client=client)
        elif spec.type == "slack":
            notifiers[name] = SlackNotifier(name=name, url=spec.url, client=client)
        else:
            if not webhook_secret:
                client.close()
                raise InvalidAlertRule(
                    "a webhook receiver needs EVALFLEET_ALERT_WEBHOOK_SECRET to sign with",
                    path="receivers", rule=None, field=name)
            notifiers[name] = WebhookNotifier(name=name, url=spec.url, client=client,
                                              secret=webhook_secret, external_url=external_url)
    return notifiers
