"""A segment's scores of a window, minute by minute, as the score rollups count them.

The minute rows of ``score_rollups`` count a score per level on the grid and, off it,
per histogram bin (``evalfleet.store.rollup``, revision 0026). Summed per minute and
level for one segment they give the alert page a window's histogram, and the minutes
that can hold its worst samples, without reading the window's score rows; the partial
minutes at a window's ends, and a minute kept before revision 0026 (an ``OFF_GRID`` row:
no bins), are left to the score rows. Pure: the read is
``store.queries.evidence.minute_levels``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from evalfleet.store.rollup import HISTOGRAM_BINS, LEVEL_GRID, OFF_GRID, level_bin
from evalfleet.store.sql import to_utc

#: A stretch of sample time, ``[low, high)``.
Range = tuple[datetime, datetime]

MINUTE = timedelta(minutes=1)


@dataclass(frozen=True)
class MinuteLevel:
    """A segment's scores of one minute at one level (``rollup.binned_level`` off the grid)."""

    minute: datetime
    level: int
    n: int


def whole_minutes(start: datetime, end: datetime) -> tuple[Range | None, list[Range]]:
    """``[start, end)`` split into its whole minutes (None without one) and the partial
    minutes at its ends."""
    start, end = to_utc(start), to_utc(end)
    first = _floor_minute(start)
    first = first if first == start else first + MINUTE
    last = _floor_minute(end)
    if first >= last:
        return None, [(start, end)] if start < end else []
    return (first, last), [(low, high) for low, high in ((start, first), (last, end))
                           if low < high]


def unbinned(rows: Sequence[MinuteLevel]) -> list[datetime]:
    """The minutes whose rows do not bin every score (kept before revision 0026, or
    holding a null score; below zero: a score kept before 0026 taken out since): their
    score rows must be read."""
    return sorted({row.minute for row in rows if row.level == OFF_GRID or row.n < 0})


def histogram(rows: Sequence[MinuteLevel], *, skip: Sequence[datetime] = ()) -> list[int]:
    """Counts per histogram bin (``rollup.HISTOGRAM_BINS`` tenths of 0..1) of ``rows``,
    the minutes in ``skip`` left out."""
    left_out = set(skip)
    counts = [0] * HISTOGRAM_BINS
    for row in rows:
        index = level_bin(row.level)
        if index is not None and row.minute not in left_out:
            counts[index] += row.n
    return counts


@dataclass(frozen=True)
class WorstRead:
    """What to read for a window's worst scores (:func:`worst_minutes`)."""

    minutes: list[datetime] | None
    """The whole minutes to read, oldest first (None: all of them)."""
    bound: float | None = None
    """Every one of the worst is at most this (at least, for the highest); None: no bound."""
    inclusive: bool = True
    """Whether the bound itself can be one of them."""


def worst_minutes(rows: Sequence[MinuteLevel], *, limit: int,
                  highest: bool = False) -> WorstRead:
    """The minutes that hold a window's ``limit`` lowest scores (highest with ``highest``),
    ordered by score, then sample time, and a bound every one of them is within.

    The bound is the least edge of a level or bin with at least ``limit`` scores within
    it; the minutes are those with a level or bin that can hold a score within it. When
    every such one is a single value (an ordinal score), the scores at the bound are
    taken earliest first, so only the first minutes holding enough of them are kept. A
    minute the rows do not bin (:func:`unbinned`) is always kept. The partial minutes at
    the window's ends are not in ``rows``: the caller reads them too.
    """
    sign = -1.0 if highest else 1.0
    unknown = set(unbinned(rows))
    held = [(row.minute, _values(row.level, sign), row.n) for row in rows
            if row.minute not in unknown]
    totals: dict[_Values, int] = {}
    for _, values, n in held:
        totals[values] = totals.get(values, 0) + n
    seen = 0
    for values, n in sorted(totals.items(), key=lambda item: item[0].top):
        seen += n
        if seen >= limit:
            bound, inclusive = values.high, values.high_in
            break
    else:
        return WorstRead(None)
    if math.isinf(bound):
        return WorstRead(None)
    under = [(minute, values, n) for minute, values, n in held
             if values.low < bound or (inclusive and values.low_in and values.low == bound)]
    kept = unknown | {minute for minute, values, _ in under if values.high < bound}
    if all(values.low == values.high for _, values, _ in under):
        # Ordinal: below the bound all of them, at it the earliest that make up the rest.
        needed = limit - sum(n for _, values, n in under if values.high < bound)
        for minute, _, n in sorted((c for c in under if c[1].high == bound),
                                   key=lambda c: c[0]):
            if needed <= 0:
                break
            kept.add(minute)
            needed -= n
    else:
        kept |= {minute for minute, _, _ in under}
    return WorstRead(sorted(kept), sign * bound, inclusive)


def minute_ranges(minutes: Sequence[datetime]) -> list[Range]:
    """Whole minutes as ranges, adjacent ones joined."""
    ranges: list[Range] = []
    for minute in sorted(minutes):
        if ranges and ranges[-1][1] == minute:
            ranges[-1] = (ranges[-1][0], minute + MINUTE)
        else:
            ranges.append((minute, minute + MINUTE))
    return ranges


@dataclass(frozen=True)
class _Values:
    """The scores a level holds, on the scale where worse is lower (the score, or its
    negative for the highest): ``low`` to ``high``, each end held or not."""

    low: float
    high: float
    low_in: bool = True
    high_in: bool = True

    @property
    def top(self) -> tuple[float, bool]:
        """For ordering by the upper end: one not held comes before one held."""
        return self.high, self.high_in


def _values(level: int, sign: float) -> _Values:
    if level > OFF_GRID:
        value = sign * level / LEVEL_GRID
        return _Values(value, value)
    index = OFF_GRID - 1 - level
    low = -math.inf if index == 0 else index / HISTOGRAM_BINS
    high = math.inf if index == HISTOGRAM_BINS - 1 else (index + 1) / HISTOGRAM_BINS
    # A bin holds [low, high); negated, (-high, -low].
    return _Values(low, high, high_in=False) if sign > 0 else _Values(-high, -low, low_in=False)


def _floor_minute(moment: datetime) -> datetime:
    return datetime.fromtimestamp(moment.timestamp() // 60 * 60, UTC)
