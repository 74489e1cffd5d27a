"""What ``--json`` prints: one JSON document, times in ISO 8601 (UTC as ``Z``).

Plain data only: dataclasses become objects, dates and times ISO 8601 text, anything
else its ``str`` (a segment reads as ``app=support-bot``).
"""

from __future__ import annotations

import dataclasses
import json
from datetime import date, datetime
from typing import Any

import click


def echo_json(value: Any) -> None:
    """Print ``value`` as indented JSON."""
    click.echo(json.dumps(value, default=_plain, indent=2, ensure_ascii=False))


def iso_time(moment: datetime | None) -> str | None:
    """``moment`` in ISO 8601, UTC written ``Z``; None stays None."""
    return None if moment is None else moment.isoformat().replace("+00:00", "Z")


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return iso_time(value)
    if isinstance(value, date):
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    return str(value)
