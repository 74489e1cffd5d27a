"""A generic webhook: Alertmanager's webhook payload (version 4), signed with HMAC-SHA256.

The receiver checks the signature over ``"<timestamp>." + body`` with the shared key
(:func:`verify_signature` does it) and may drop repeats by the ``Idempotency-Key``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable
from typing import Any

import httpx

from evalfleet.alerts.notifier.base import Notifier
from evalfleet.alerts.outbox import Notification

#: Header with the POSIX time the signature covers.
TIMESTAMP_HEADER = "X-Evalfleet-Timestamp"

#: Header with ``sha256=<hex digest>``.
SIGNATURE_HEADER = "X-Evalfleet-Signature"

#: ``endsAt`` of a firing alert in Alertmanager's webhook payload.
ZERO_TIME = "0001-01-01T00:00:00Z"


class WebhookNotifier(Notifier):
    """Posts Alertmanager-style webhook payloads with an HMAC signature.

    Args:
        name: The receiver's name.
        url: The webhook URL.
        client: The HTTP client.
        secret: The shared HMAC key.
        external_url: Sent as ``externalURL``.
        clock: POSIX seconds now (for the signed timestamp).
    """

    def __init__(self, *, name: str, url: str, client: httpx.Client, secret: str,
                 external_url: str, clock: Callable[[], float] = time.time) -> None:
        super().__init__(name=name, url=url, client=client)
        self._secret = secret.encode("utf-8")
        self._external_url = external_url
        self._clock = clock

    def send(self, notification: Notification) -> None:
        """See :meth:`Notifier.send`."""
        payload = webhook_payload(notification, receiver=self.name,
                                  external_url=self._external_url)
        content = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        timestamp = str(int(self._clock()))
        headers = {TIMESTAMP_HEADER: timestamp,
                   SIGNATURE_HEADER: sign(self._secret, timestamp=timestamp, body=content)}
        self._post_content(self.url, content, notification=notification, headers=headers)


def webhook_payload(notification: Notification, *, receiver: str,
                    external_url: str) -> dict[str, Any]:
    """Alertmanager's webhook body (version 4) for one alert."""
    alert = notification.alert
    labels = alert["labels"]
    status = alert["status"]
    # An incident's notification is the group of its segments, as Alertmanager grouping
    # by ``incident`` would name it.
    group_labels = {key: labels[key] for key in ("alertname", "incident") if key in labels}
    group_key = ",".join(f'{key}="{value}"' for key, value in group_labels.items())
    return {
        "version": "4",
        "groupKey": "{}:{" + group_key + "}",
        "truncatedAlerts": 0,
        "status": status,
        "receiver": receiver,
        "groupLabels": group_labels,
        "commonLabels": labels,
        "commonAnnotations": alert["annotations"],
        "externalURL": external_url,
        "alerts": [{
            "status": status, "labels": labels, "annotations": alert["annotations"],
            "startsAt": alert["startsAt"],
            "endsAt": alert["endsAt"] if status == "resolved" else ZERO_TIME,
            "generatorURL": alert["generatorURL"], "fingerprint": fingerprint(labels),
        }],
    }


def fingerprint(labels: dict[str, str]) -> str:
    """A stable 16-hex-digit identity of an alert's label set."""
    text = "\x1f".join(f"{k}\x1e{v}" for k, v in sorted(labels.items()))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def sign(secret: bytes, *, timestamp: str, body: bytes) -> str:
    """The signature header value: ``sha256=`` and the HMAC of ``timestamp.body``."""
    digest = hmac.new(secret, timestamp.encode("ascii") + b"." + body, hashlib.sha256)
    return "sha256=" + digest.hexdigest()


def verify_signature(secret: bytes, *, timestamp: str, body: bytes, signature: str,
                     now_s: float | None = None, tolerance_s: float = 300.0) -> bool:
    """Check a webhook's signature and freshness, in constant time.

    Args:
        secret: The shared key.
        timestamp: The timestamp header.
        body: The raw body.
        signature: The signature header.
        now_s: POSIX seconds now; None for the clock.
        tolerance_s: Oldest (or furthest in the future) timestamp accepted.

    Returns:
        True when the signature matches and the timestamp is recent.
    """
    try:
        age_s = abs((time.time() if now_s is None else now_s) - int(timestamp))
    except ValueError:
        return False
    expected = sign(secret, timestamp=timestamp, body=body)
    return age_s <= tolerance_s and hmac.compare_digest(expected, signature)
