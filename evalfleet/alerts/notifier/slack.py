"""Slack (and compatible chat tools: Mattermost, Rocket.Chat): an incoming webhook."""

from __future__ import annotations

from typing import Any

from evalfleet.alerts.notifier.base import Notifier
from evalfleet.alerts.outbox import Notification

#: Slack refuses a section text over 3,000 characters.
MAX_BLOCK_CHARS = 3000

#: Longest fallback text.
MAX_TITLE_CHARS = 500

#: Title prefix per notification kind.
_TITLES = {"firing": "FIRING", "renotify": "STILL FIRING", "resolved": "RESOLVED",
           "no_data": "NO DATA", "data_back": "DATA BACK"}


class SlackNotifier(Notifier):
    """Posts a message with a plain-text fallback and one formatted block."""

    def send(self, notification: Notification) -> None:
        """See :meth:`Notifier.send`."""
        self._post(self.url, slack_message(notification), notification=notification)


def slack_message(notification: Notification) -> dict[str, Any]:
    """The incoming-webhook body for one notification.

    Every text from outside (summary, description, segment values, the worst samples'
    ids and explanations) is escaped for Slack's mrkdwn, so ``<!channel>`` or
    ``<http://x|click>`` in a sample shows as text and pings or links nobody.
    """
    alert = notification.alert
    annotations = alert["annotations"]
    labels = alert["labels"]
    title = f"[{_TITLES.get(notification.kind, notification.kind.upper())}] " \
            f"{annotations.get('summary', labels['alertname'])}"
    lines = [f"*{escape_mrkdwn(title)}*", escape_mrkdwn(annotations.get("description", ""))]
    worst = [annotations[key] for key in sorted(annotations) if key.startswith("worst_sample_")]
    if worst:
        lines.append("Lowest-scoring samples:")
        lines.extend(f"• {escape_mrkdwn(line)}" for line in worst)
    if annotations.get("runbook_url"):
        lines.append(f"Runbook: {escape_mrkdwn(annotations['runbook_url'])}")
    lines.append(f"<{escape_mrkdwn(alert['generatorURL'])}|Open the alert>")
    context = ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))
    body = "\n".join(line for line in lines if line)
    return {
        "text": plain_title(title),
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": _cut(body)}},
            {"type": "context", "elements": [
                {"type": "mrkdwn", "text": _cut(escape_mrkdwn(context))}]},
        ],
    }


def escape_mrkdwn(text: str) -> str:
    """Slack's three control characters as entities: ``&``, ``<`` and ``>``."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def plain_title(title: str) -> str:
    """The notification's fallback text (also mrkdwn to Slack): escaped and bounded."""
    return _cut(escape_mrkdwn(title), limit=MAX_TITLE_CHARS)


def _cut(text: str, *, limit: int = MAX_BLOCK_CHARS) -> str:
    # Never cut inside an entity: drop a partial "&amp;" at the end.
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    amp = cut.rfind("&")
    if amp != -1 and ";" not in cut[amp:]:
        cut = cut[:amp]
    return cut + "…"
