"""What a Celery task message on a kombu virtual transport holds, read lightly. Pure.

Only what queue statistics need: how many jobs the message carries, when the
oldest was accepted, and when it is due. The samples are not validated here (a
worker does that); a message that cannot be read counts as one job, since it
would become one dead letter.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class EnvelopeSummary:
    """The jobs inside one broker message."""

    jobs: int
    """Jobs the message carries (1 when it cannot be read)."""
    oldest_enqueued_at: datetime | None
    """The earliest ``enqueued_at`` of its jobs, when readable."""
    eta: datetime | None
    """When the task is due (Celery's ``eta`` header), if it has one."""


def summarize_envelope(raw: Any) -> EnvelopeSummary:
    """Summarise one message as kombu stores it (a JSON text, or its parsed dict).

    Args:
        raw: The stored message: bytes or str of JSON, or the dict itself.

    Returns:
        Its summary; never raises.
    """
    try:
        envelope = json.loads(raw) if isinstance(raw, bytes | str) else raw
        headers = envelope.get("headers") or {}
        message = _task_argument(envelope)
    except (TypeError, ValueError, AttributeError, IndexError, KeyError):
        return EnvelopeSummary(jobs=1, oldest_enqueued_at=None, eta=None)
    entries = message.get("jobs") if isinstance(message, dict) else None
    jobs = entries if isinstance(entries, list) and entries else [message]
    times = [moment for moment in (_time(job.get("enqueued_at")) for job in jobs
                                   if isinstance(job, dict)) if moment is not None]
    return EnvelopeSummary(jobs=len(jobs), oldest_enqueued_at=min(times, default=None),
                           eta=_time(headers.get("eta")))


def _task_argument(envelope: dict[str, Any]) -> Any:
    """The task's first positional argument: the job message."""
    body = envelope["body"]
    if (envelope.get("properties") or {}).get("body_encoding") == "base64":
        body = base64.b64decode(body)
    args, _kwargs, _embed = json.loads(body)
    return args[0]


def _time(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None
