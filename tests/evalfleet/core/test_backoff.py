"""Backoff arithmetic and Retry-After parsing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from evalfleet.core.backoff import compute_backoff, parse_retry_after


@pytest.mark.parametrize(("attempt", "jitter", "retry_after_s", "expected"), [
    (1, 0.0, None, 1.0),       # half of base 2 s
    (1, 0.999999, None, 2.0),
    (2, 0.0, None, 2.0),
    (3, 0.0, None, 4.0),
    (10, 0.5, None, 45.0),     # capped at 60, then jitter: 60 * 0.75
    (1, 0.0, 7.0, 7.0),        # Retry-After is a floor
    (4, 0.0, 1.0, 8.0),        # ...but never lowers the backoff
    (1, 0.0, 500.0, 60.0),     # ...and the cap still holds
])
def test_compute_backoff(attempt: int, jitter: float, retry_after_s: float | None,
                         expected: float) -> None:
    delay = compute_backoff(attempt, base_s=2.0, cap_s=60.0, retry_after_s=retry_after_s,
                            jitter=jitter)
    assert delay == pytest.approx(expected, abs=1e-3)


def test_backoff_grows_and_stays_capped() -> None:
    delays = [compute_backoff(a, base_s=1, cap_s=30, retry_after_s=None, jitter=0.0)
              for a in range(1, 12)]
    assert delays == sorted(delays)
    assert max(delays) <= 30


NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(("headers", "expected"), [
    ({}, None),
    ({"Retry-After": "3"}, 3.0),
    ({"retry-after": "1.5"}, 1.5),
    ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
    ({"Retry-After": "Sun, 22 Nov 2026 12:00:30 GMT"}, 30.0),
    ({"Retry-After": "Sun, 22 Nov 2026 11:00:00 GMT"}, 0.0),
    ({"Retry-After": "soon"}, None),
    ({"Retry-After": "-4"}, None),
    ({"Retry-After": "inf"}, None),
])
def test_parse_retry_after(headers: dict[str, str], expected: float | None) -> None:
    assert parse_retry_after(headers, now=NOW) == expected
