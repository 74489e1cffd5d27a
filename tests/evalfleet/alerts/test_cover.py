"""Splitting a window into whole rollup buckets and partial minutes."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from evalfleet.alerts.cover import cover, settled_at

H = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
S, M, HOUR = timedelta(seconds=1), timedelta(minutes=1), timedelta(hours=1)


@pytest.mark.parametrize(("start", "end", "cuts", "raw", "minutes", "hours"), [
    (H, H + 2 * HOUR, (), (), (), ((H, H + 2 * HOUR),)),
    (H - 10 * M, H, (), (), ((H - 10 * M, H),), ()),
    (H - 10 * M - 5 * S, H + 3 * S, (), ((H - 10 * M - 5 * S, H - 10 * M), (H, H + 3 * S)),
     ((H - 10 * M, H),), ()),
    (H - 90 * M, H + HOUR + 30 * M, (), (), ((H - 90 * M, H - HOUR), (H + HOUR, H + 90 * M)),
     ((H - HOUR, H + HOUR),)),
    (H + 10 * S, H + 50 * S, (), ((H + 10 * S, H + 50 * S),), (), ()),
    # An exclusion starting mid-minute splits the minute; one on a minute splits the hour.
    (H, H + 2 * HOUR, (H + 30 * M + 7 * S, H + HOUR + 5 * M, H + 5 * HOUR),
     ((H + 30 * M, H + 31 * M),), ((H, H + 30 * M), (H + 31 * M, H + 2 * HOUR)), ()),
    (H, H, (), (), (), ()),
])
def test_cover(start: datetime, end: datetime, cuts: tuple[datetime, ...],
               raw: tuple, minutes: tuple, hours: tuple) -> None:
    plan = cover(start, end, cuts=cuts)
    assert plan.raw == raw
    assert plan.buckets.get(60, ()) == minutes
    assert plan.buckets.get(3600, ()) == hours


def test_every_second_is_covered_once() -> None:
    start, end = H - 3 * HOUR - 17 * S, H + 2 * HOUR + 41 * M + 3 * S
    plan = cover(start, end, cuts=[H - 59 * M - 1 * S, H + 12 * M])
    pieces = sorted([*plan.raw, *(r for ranges in plan.buckets.values() for r in ranges)])
    assert pieces[0][0] == start and pieces[-1][1] == end
    assert all(a[1] == b[0] for a, b in itertools.pairwise(pieces))
    for span, ranges in plan.buckets.items():
        for low, high in ranges:
            assert low.timestamp() % span == 0 and high.timestamp() % span == 0


@pytest.mark.parametrize(("now", "intervals", "expected"), [
    (H + 30 * S, (M,), H),
    (H + 59 * M + 59 * S + timedelta(microseconds=999_999), (M, 5 * M), H + 59 * M),
    (H, (M,), H),
    (H + 30 * S, (), H),
    # A rule every 30 s would lose every other slot to the floor: the tick's own time.
    (H + 30 * S, (M, 30 * S), H + 30 * S),
    (H + 30 * S, (90 * S,), H + 30 * S),
])
def test_a_scheduled_cycle_evaluates_at_the_last_whole_minute(
        now: datetime, intervals: tuple[timedelta, ...], expected: datetime) -> None:
    at = settled_at(now, intervals=intervals)
    assert at == expected
    if at != now:  # nothing of the window is then left to the score rows
        assert cover(at - 10 * M, at).raw == ()
