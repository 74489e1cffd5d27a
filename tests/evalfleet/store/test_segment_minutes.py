"""Which minutes of a window can hold its worst samples, from the minute rollups' counts.

Pure: rows of (minute, level, count) in, minutes and a bound out. The reads against
stored verdicts are in ``tests/evalfleet/alerts/test_segment_reads.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from evalfleet.store.queries.segment_minutes import (
    MinuteLevel,
    WorstRead,
    histogram,
    minute_ranges,
    unbinned,
    whole_minutes,
    worst_minutes,
)
from evalfleet.store.rollup import LEVEL_GRID, OFF_GRID, binned_level

T0 = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def minute(i: int) -> datetime:
    return T0 + timedelta(minutes=i)


def on_grid(i: int, value: float, n: int) -> MinuteLevel:
    return MinuteLevel(minute(i), round(value * LEVEL_GRID), n)


def in_bin(i: int, index: int, n: int) -> MinuteLevel:
    return MinuteLevel(minute(i), binned_level(index), n)


def test_ordinal_ties_take_the_earliest_minutes_only() -> None:
    # Zeros in every minute: the five worst are the earliest zeros.
    rows = [on_grid(i, 0.0, 2) for i in range(10)] + [on_grid(i, 1.0, 50) for i in range(10)]
    assert worst_minutes(rows, limit=5) == WorstRead([minute(0), minute(1), minute(2)], 0.0)
    # A lone lower value elsewhere comes first, so one zero fewer is needed.
    rows.append(on_grid(7, -0.5, 1))
    assert worst_minutes(rows, limit=5) == WorstRead([minute(0), minute(1), minute(7)], 0.0)
    # The highest: the earliest ones.
    assert worst_minutes(rows, limit=60, highest=True) == WorstRead([minute(0), minute(1)], 1.0)


def test_binned_scores_keep_the_minutes_that_can_hold_a_score_under_the_bound() -> None:
    rows = [in_bin(i, 8, 100) for i in range(10)]
    rows += [in_bin(3, 2, 2), in_bin(6, 4, 4), on_grid(8, 0.5, 3), in_bin(9, 5, 1)]
    # Two in [0.2, 0.3), four in [0.4, 0.5): the five worst are under 0.5, so neither the
    # 0.5s of minute 8 nor the bin from 0.5 of minute 9 can hold one.
    assert worst_minutes(rows, limit=5) == WorstRead([minute(3), minute(6)], 0.5, False)
    # Seven: the 0.5s make up the rest; as the bound is held, the bin from 0.5 is read too.
    assert worst_minutes(rows, limit=7) == WorstRead(
        [minute(3), minute(6), minute(8), minute(9)], 0.5)
    # Eleven: up to the bin of the 0.8s, which every minute holds.
    assert worst_minutes(rows, limit=11) == WorstRead(
        [minute(i) for i in range(10)], 0.9, False)
    # The highest three are in the bin from 0.8 (0.8 held), which every minute holds.
    assert worst_minutes(rows, limit=3, highest=True) == WorstRead(
        [minute(i) for i in range(10)], 0.8)
    # One in the last bin (0.9 and above): the highest is there.
    rows.append(in_bin(4, 9, 1))
    assert worst_minutes(rows, limit=1, highest=True) == WorstRead([minute(4)], 0.9)
    # The lowest two, when the first bin (below 0.1, no lower edge) holds one: no bound
    # can be drawn under it, but the minute with it and the next ones are known.
    rows.append(in_bin(5, 0, 1))
    assert worst_minutes(rows, limit=2) == WorstRead([minute(3), minute(5)], 0.3, False)


def test_unbinned_minutes_are_always_read_and_too_few_means_all() -> None:
    rows = [on_grid(i, 0.0, 3) for i in range(5)] + [MinuteLevel(minute(9), OFF_GRID, 4)]
    assert unbinned(rows) == [minute(9)]
    assert worst_minutes(rows, limit=2) == WorstRead([minute(0), minute(9)], 0.0)
    assert worst_minutes(rows, limit=16) == WorstRead(None)  # 15 known: read everything
    # A row below zero (a score kept before the bins taken out since) is unbinned too.
    assert unbinned([in_bin(2, 3, -1)]) == [minute(2)]


def test_histogram_bins_levels_and_bins_and_skips_minutes() -> None:
    rows = [on_grid(0, 0.0, 2), on_grid(0, 1.0, 3), on_grid(1, 0.25, 1), in_bin(1, 6, 4),
            in_bin(2, 6, 7)]
    assert histogram(rows) == [2, 0, 1, 0, 0, 0, 11, 0, 0, 3]
    assert histogram(rows, skip=[minute(2)]) == [2, 0, 1, 0, 0, 0, 4, 0, 0, 3]


def test_whole_minutes_and_their_ranges() -> None:
    start, end = minute(0) + timedelta(seconds=7), minute(3) + timedelta(seconds=1)
    assert whole_minutes(start, end) == ((minute(1), minute(3)),
                                         [(start, minute(1)), (minute(3), end)])
    assert whole_minutes(minute(0), minute(2)) == ((minute(0), minute(2)), [])
    inside = minute(0) + timedelta(seconds=50)
    assert whole_minutes(start, inside) == (None, [(start, inside)])
    assert minute_ranges([minute(4), minute(1), minute(2)]) == [
        (minute(1), minute(3)), (minute(4), minute(5))]
