"""The notifier contract, and the one place HTTP errors become evalfleet errors."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from typing import Any

import httpx

from evalfleet.alerts.outbox import Notification
from evalfleet.core.errors import ReceiverRejected, ReceiverUnavailable

#: Header that carries a notification's idempotency key.
IDEMPOTENCY_HEADER = "Idempotency-Key"


class Notifier(ABC):
    """Sends notifications to one receiver over HTTP.

    Args:
        name: The receiver's name (in errors and metrics).
        url: Where to send.
        client: The HTTP client (timeouts set by the caller).
    """

    def __init__(self, *, name: str, url: str, client: httpx.Client) -> None:
        self.name = name
        self.url = url
        self._client = client

    @abstractmethod
    def send(self, notification: Notification) -> None:
        """Deliver one notification.

        Raises:
            ReceiverUnavailable: Transport error, timeout, 429 or 5xx: try again later.
            ReceiverRejected: Any other non-2xx status: trying again will not help.
        """

    def close(self) -> None:
        """Release the HTTP client."""
        self._client.close()

    def _post(self, url: str, body: Any, *, notification: Notification,
              headers: dict[str, str] | None = None) -> bytes:
        """POST ``body`` as JSON with the idempotency key; returns the bytes sent."""
        content = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        self._post_content(url, content, notification=notification, headers=headers)
        return content

    def _post_content(self, url: str, content: bytes, *, notification: Notification,
                      headers: dict[str, str] | None = None) -> None:
        """POST JSON bytes with the idempotency key."""
        all_headers = {"content-type": "application/json",
                       IDEMPOTENCY_HEADER: notification.idempotency_key, **(headers or {})}
        post_json(self._client, url, content, headers=all_headers, receiver=self.name)


def post_json(client: httpx.Client, url: str, content: bytes, *, headers: dict[str, str],
              receiver: str) -> None:
    """POST bytes and translate every failure into the evalfleet error tree.

    Raises:
        ReceiverUnavailable: Transport error, timeout, 429 or 5xx.
        ReceiverRejected: Any other status outside 2xx.
    """
    try:
        response = client.post(url, content=content, headers=headers)
    except httpx.TimeoutException as exc:
        raise ReceiverUnavailable(f"timed out: {type(exc).__name__}",
                                  receiver=receiver) from exc
    except httpx.TransportError as exc:
        raise ReceiverUnavailable(f"cannot connect: {type(exc).__name__}",
                                  receiver=receiver) from exc
    status = response.status_code
    if status == 429 or status >= 500:
        raise ReceiverUnavailable(f"HTTP {status}", receiver=receiver, status_code=status)
    if not 200 <= status < 300:
        raise ReceiverRejected(f"HTTP {status}: {response.text[:200]}", receiver=receiver,
                               status_code=status)
