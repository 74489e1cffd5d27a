"""Draining the outbox: each due notification to its receiver, with retries and backoff.

A notification is tried up to ``attempts`` times in one pass, waiting an
exponential backoff with jitter between tries. If the receiver is still
unavailable it stays queued and is due again after one more backoff; if it
rejects the notification (4xx other than 429), it is given up at once. Every
attempt carries the same idempotency key, so a receiver that did get an
earlier attempt can drop the repeat.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from evalfleet.alerts import outbox
from evalfleet.alerts.notifier import Notifier
from evalfleet.alerts.outbox import Notification
from evalfleet.core.backoff import compute_backoff
from evalfleet.core.errors import ReceiverRejected, ReceiverUnavailable
from evalfleet.core.settings import AlertSettings
from evalfleet.store import SqlStore

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeliveryOptions:
    """How hard to try (:meth:`from_settings`; the defaults are the settings' own)."""

    attempts: int
    """HTTP attempts per notification in one pass."""
    retry_base_s: float
    """Delay after the first failure; doubles per attempt, with jitter."""
    retry_max_s: float
    """Longest delay."""
    timeout_s: float
    """Timeout of one request (sizes the lease)."""

    @classmethod
    def from_settings(cls, alerts: AlertSettings) -> DeliveryOptions:
        """The options of the alert settings group."""
        return cls(attempts=alerts.alert_delivery_attempts,
                   retry_base_s=alerts.alert_retry_base_s,
                   retry_max_s=alerts.alert_retry_max_s,
                   timeout_s=alerts.alert_delivery_timeout_s)

    @property
    def lease_s(self) -> float:
        """How long a taken notification is left alone by other evaluators."""
        return self.attempts * (self.timeout_s + self.retry_max_s) + 60.0


@dataclass
class DeliveryReport:
    """What one pass did, by receiver."""

    delivered: dict[str, int]
    """Notifications accepted."""
    retrying: dict[str, int]
    """Notifications left queued after failed attempts."""
    failed: dict[str, int]
    """Notifications given up (rejected, or no such receiver)."""

    @classmethod
    def empty(cls) -> DeliveryReport:
        """Nothing done yet."""
        return cls({}, {}, {})


class Dispatcher:
    """Sends due notifications to their receivers.

    Args:
        store: The verdict store holding the outbox.
        notifiers: Notifiers by receiver name.
        options: Retry settings.
        clock: The current time.
        sleep: Waits between attempts.
        jitter: A number in [0, 1) per call.
        on_attempt: Called with receiver and outcome (``delivered``, ``retry``,
            ``failed``) after every attempt, for metrics.
    """

    def __init__(
        self, *, store: SqlStore, notifiers: Mapping[str, Notifier], options: DeliveryOptions,
        clock: Callable[[], datetime] | None = None, sleep: Callable[[float], None] = time.sleep,
        jitter: Callable[[], float] = random.random,
        on_attempt: Callable[[str, str], None] | None = None,
    ) -> None:
        self._store = store
        self._notifiers = notifiers
        self._options = options
        self._clock = clock or (lambda: datetime.now(UTC))
        self._sleep = sleep
        self._jitter = jitter
        self._on_attempt = on_attempt or (lambda receiver, outcome: None)

    def deliver_due(self) -> DeliveryReport:
        """Send every notification due now, oldest first.

        Returns:
            Counts by receiver.
        """
        report = DeliveryReport.empty()
        due = outbox.take_due(self._store, now=self._clock(), lease_s=self._options.lease_s)
        for notification in due:
            outcome = self._deliver(notification)
            counts = getattr(report, outcome)
            counts[notification.receiver] = counts.get(notification.receiver, 0) + 1
        return report

    def _deliver(self, notification: Notification) -> str:
        notifier = self._notifiers.get(notification.receiver)
        if notifier is None:
            outbox.mark_failed(self._store, notification.id, attempts=notification.attempts,
                               now=self._clock(), error="no such receiver is configured")
            self._on_attempt(notification.receiver, "failed")
            return "failed"
        attempts = notification.attempts
        error = ""
        for round_ in range(1, self._options.attempts + 1):
            attempts += 1
            try:
                notifier.send(notification)
            except ReceiverRejected as exc:
                logger.error("alert notification %s given up: %s", notification.id, exc)
                outbox.mark_failed(self._store, notification.id, attempts=attempts,
                                   now=self._clock(), error=str(exc))
                self._on_attempt(notification.receiver, "failed")
                return "failed"
            except ReceiverUnavailable as exc:
                error = str(exc)
                self._on_attempt(notification.receiver, "retry")
                if round_ < self._options.attempts:
                    self._sleep(self._backoff_s(attempts))
                continue
            outbox.mark_delivered(self._store, notification.id, attempts=attempts,
                                  now=self._clock())
            self._on_attempt(notification.receiver, "delivered")
            return "delivered"
        logger.warning("alert notification %s not delivered yet (%s attempts): %s",
                       notification.id, attempts, error)
        next_attempt_at = self._clock() + timedelta(seconds=self._backoff_s(attempts))
        outbox.mark_retry(self._store, notification.id, attempts=attempts,
                          next_attempt_at=next_attempt_at, error=error)
        return "retrying"

    def _backoff_s(self, attempt: int) -> float:
        return compute_backoff(attempt, base_s=self._options.retry_base_s,
                               cap_s=self._options.retry_max_s, retry_after_s=None,
                               jitter=self._jitter())
