"""Slack (and compatible chat tools: Mattermost, Rocket.Chat): an incoming webhook."""

from __future__ import annotations

from typing import Any

from workers.alerts.notifier.base import Notifier
from workers.alerts.outbox import Notification

#: Title prefix per notification kind.
_TITLES = {"firing": "FIRING", "renotify": "STILL FIRING", "resolved": "RESOLVED",
           "no_data": "NO DATA", "data_back": "DATA BACK"}


class SlackNotifier(Notifier):
    """Posts a message with a plain-text fallback and one formatted block."""

    def send(self, notification: Notification) -> None:
        """See :meth:`Notifier.send`."""
        self._post(self.url, slack_message(notification), notification=notification)


def slack_message(notification: Notification) -> dict[str, Any]:
    """The incoming-webhook body for one notification."""
    alert = notification.alert
    annotations = alert["annotations"]
    labels = alert["labels"]
    title = f"[{_TITLES.get(notification.kind, notification.kind.upper())}] " \
            f"{annotations.get('summary', labels['alertname'])}"
    lines = [f"*{title}*", annotations.get("description", "")]
    if annotations.get("runbook_url"):
        lines.append(f"Runbook: {annotations['runbook_url']}")
    lines.append(f"<{alert['generatorURL']}|Dashboard>")
    context = ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))
    return {
        "text": title,
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(
                line for line in lines if line)}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": context}]},
        ],
    }
