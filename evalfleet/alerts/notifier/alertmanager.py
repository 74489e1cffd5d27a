"""Alertmanager: alerts posted to its v2 API (``POST /api/v2/alerts``)."""

from __future__ import annotations

from evalfleet.alerts.notifier.base import Notifier
from evalfleet.alerts.outbox import Notification

#: The keys of a postable alert in Alertmanager's v2 API.
POSTABLE_KEYS = ("labels", "annotations", "startsAt", "endsAt", "generatorURL")


class AlertmanagerNotifier(Notifier):
    """Posts each notification as a one-alert list; Alertmanager groups and routes them.

    A resolved alert is the same labels with ``endsAt`` at the resolution time.
    """

    def send(self, notification: Notification) -> None:
        """See :meth:`Notifier.send`."""
        self._post(self.url.rstrip("/") + "/api/v2/alerts", [postable_alert(notification)],
                   notification=notification)


def postable_alert(notification: Notification) -> dict[str, object]:
    """The alert as Alertmanager's v2 API takes it."""
    return {key: notification.alert[key] for key in POSTABLE_KEYS if key in notification.alert}
