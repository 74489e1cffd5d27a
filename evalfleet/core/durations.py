"""Durations and moments as people write and read them: the one grammar of every option,
rule and report.

A duration is a non-negative number and a unit, ``30s``, ``1.5m``, ``2h``, ``7d`` or
``1w``, or a bare number of seconds. It is written back in its largest whole unit
(``90s``, ``5m``, ``2h``, ``1d``); an age shown to an operator is compound (``2m10s``).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

#: Seconds in each unit of the grammar.
UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$", re.ASCII)

#: What an error message shows as the grammar.
EXAMPLES = "30s, 10m, 2h, 7d or 1w"


def parse_duration(text: str) -> timedelta:
    """Read a duration (see the module's grammar).

    Raises:
        ValueError: When ``text`` is not a duration, or one too long to represent.
    """
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration such as {EXAMPLES}")
    try:
        return timedelta(seconds=float(match.group(1)) * UNIT_S[match.group(2) or "s"])
    except OverflowError:
        raise ValueError(f"{text!r} is longer than any duration evalfleet can hold") from None


def format_duration(span: timedelta | float) -> str:
    """A configured span (a timedelta or seconds) in its largest whole unit: ``90s``,
    ``5m``, ``2h``, ``1d``; a fraction of a second is kept (``0.5s``)."""
    seconds = span.total_seconds() if isinstance(span, timedelta) else float(span)
    for unit in ("d", "h", "m"):
        size = UNIT_S[unit]
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def format_age(seconds: float | None) -> str:
    """An age or lag for an operator: ``4.2s``, ``45s``, ``2m10s``, ``1h05m``, ``3d04h``;
    ``-`` when unknown."""
    if seconds is None:
        return "-"
    whole = round(seconds)
    if seconds < 10:
        return f"{seconds:.1f}s"
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def format_moment(moment: datetime) -> str:
    """A moment to the minute, in UTC: ``2026-11-25T12:31Z``. A naive moment is UTC
    already (as every stored time is), never the machine's local time."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%MZ")
