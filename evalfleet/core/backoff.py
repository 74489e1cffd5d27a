"""Retry timing after a transient judge failure. Pure.

Exponential backoff with jitter, capped; a judge's Retry-After is a floor, so
the worker never comes back sooner than it was asked to.
"""

from __future__ import annotations

import email.utils
from collections.abc import Mapping
from datetime import UTC, datetime


def compute_backoff(
    attempt: int, *, base_s: float, cap_s: float, retry_after_s: float | None, jitter: float,
) -> float:
    """Seconds to wait before the next attempt.

    Args:
        attempt: The attempt that just failed, from 1.
        base_s: Delay after the first failure, before jitter.
        cap_s: The longest delay returned.
        retry_after_s: What the judge asked for, if anything.
        jitter: A number in [0, 1); spreads retries of many jobs over the upper
            half of the exponential delay so they do not return in lockstep.

    Returns:
        The delay in seconds, in ``[0, cap_s]``.
    """
    exponential = min(cap_s, base_s * 2 ** (attempt - 1))
    delay = exponential * (0.5 + 0.5 * jitter)
    if retry_after_s is not None:
        delay = max(delay, retry_after_s)
    return min(cap_s, max(0.0, delay))


def parse_retry_after(headers: Mapping[str, str], *, now: datetime | None = None) -> float | None:
    """The delay a response asks for, in seconds, or None.

    Reads ``retry-after-ms`` (some OpenAI-compatible servers), then ``Retry-After``
    as seconds or an HTTP date.

    Args:
        headers: Response headers (case-insensitive mapping, or lower-case keys).
        now: The current time, for HTTP dates.
    """
    lowered = {key.lower(): value for key, value in headers.items()}
    milliseconds = _number(lowered.get("retry-after-ms"))
    if milliseconds is not None:
        return milliseconds / 1000
    value = lowered.get("retry-after")
    if value is None:
        return None
    seconds = _number(value)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if number >= 0 and number == number and number != float("inf") else None
