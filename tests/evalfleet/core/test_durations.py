"""The one duration grammar: every option, rule and report reads and writes it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from evalfleet.core.durations import format_age, format_duration, format_moment, parse_duration


@pytest.mark.parametrize(("text", "seconds"), [
    ("30s", 30), ("10m", 600), ("1.5m", 90), ("2h", 7200), ("7d", 604800), ("1w", 604800),
    ("45", 45), ("0", 0), (" 5 m ", 300), ("0.25s", 0.25),
])
def test_reads_every_unit_and_bare_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", [
    "", "m", "-5m", "5x", "5 minutes", "1h30m", "²d", "\u0663m", "1e3s", "nan", "inf",
    "99999999999d", "9" * 40 + "s", "5m\x00",
])
def test_rejects_anything_else_naming_the_value(text: str) -> None:
    with pytest.raises(ValueError, match="duration") as caught:
        parse_duration(text)
    assert repr(text) in str(caught.value)


def test_a_long_text_is_rejected_in_linear_time() -> None:
    with pytest.raises(ValueError):
        parse_duration("1" * 200_000 + "q")


@pytest.mark.parametrize(("span", "text"), [
    (90, "90s"), (300, "5m"), (7200, "2h"), (86400, "1d"), (604800, "7d"), (0.5, "0.5s"),
    (timedelta(minutes=10), "10m"), (timedelta(seconds=61), "61s"),
])
def test_writes_the_largest_whole_unit(span: float | timedelta, text: str) -> None:
    assert format_duration(span) == text
    assert parse_duration(text) == (span if isinstance(span, timedelta)
                                    else timedelta(seconds=span))


@pytest.mark.parametrize(("seconds", "text"), [
    (None, "-"), (4.24, "4.2s"), (45, "45s"), (130, "2m10s"), (3900, "1h05m"),
    (273600, "3d04h"),
])
def test_ages_are_compound(seconds: float | None, text: str) -> None:
    assert format_age(seconds) == text


def test_moments_are_minutes_in_utc() -> None:
    moment = datetime(2026, 11, 25, 13, 31, 59, tzinfo=timezone(timedelta(hours=1)))
    assert format_moment(moment) == "2026-11-25T12:31Z"
    assert format_moment(moment.astimezone(UTC)) == "2026-11-25T12:31Z"
    # A naive moment is a stored UTC time, whatever the machine's zone.
    assert format_moment(datetime(2026, 11, 25, 12, 31, 59)) == "2026-11-25T12:31Z"
