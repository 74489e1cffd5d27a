"""Which parts of a window to read from the rollups, and which from the score rows.

A window ``[start, end)`` on sample time is cut at its ends and at every time where a
baseline exclusion begins or ends (those are cycle times, rarely on a minute). Each
piece then has hours in its middle, minutes either side of them, and at its ends the
seconds before the first whole minute and after the last: those seconds are read from
the score rows, the rest from the rollups (``evalfleet.store.rollup``). Every bucket read
is then wholly inside or wholly outside each exclusion, so excluding a bucket by its start
is exact. Pure: times in, ranges out.

:func:`settled_at` is where ``evalfleet beat`` evaluates: the last whole minute, so a
scheduled cycle reads no score row at all.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

#: The rollups' buckets, longest first (``evalfleet.store.rollup.BUCKET_SPANS_S``).
SPANS_S = (3600, 60)

#: The smallest bucket, in seconds: a time on it splits no bucket.
MINUTE_S = SPANS_S[-1]

Range = tuple[datetime, datetime]


@dataclass(frozen=True)
class Cover:
    """A window split into what the rollups hold and what the score rows must give."""

    raw: tuple[Range, ...] = ()
    """Ranges read from the score rows (the partial minutes)."""
    buckets: dict[int, tuple[Range, ...]] = field(default_factory=dict)
    """Per bucket span in seconds, the ranges of whole buckets read from the rollups."""


def cover(start: datetime, end: datetime, *, cuts: Iterable[datetime] = ()) -> Cover:
    """Split ``[start, end)`` into whole rollup buckets and the rest.

    Args:
        start: Window start (inclusive).
        end: Window end (exclusive).
        cuts: Times no bucket may straddle (exclusion boundaries); those outside the
            window are ignored.

    Returns:
        The cover; adjacent ranges of one kind are joined.
    """
    points = sorted({start, end, *(c for c in cuts if start < c < end)})
    raw: list[Range] = []
    buckets: dict[int, list[Range]] = {span: [] for span in SPANS_S}
    for low, high in itertools.pairwise(points):
        _split(low, high, SPANS_S, raw, buckets)
    return Cover(raw=_joined(raw),
                 buckets={span: _joined(ranges) for span, ranges in buckets.items() if ranges})


def _split(low: datetime, high: datetime, spans: tuple[int, ...], raw: list[Range],
           buckets: dict[int, list[Range]]) -> None:
    """Whole buckets of the first span in the middle, the sides split by the next spans,
    what is left under the last span to ``raw``."""
    if low >= high:
        return
    if not spans:
        raw.append((low, high))
        return
    span, rest = spans[0], spans[1:]
    first, last = _ceil(low, span), floor_time(high, span)
    if first >= last:
        _split(low, high, rest, raw, buckets)
        return
    _split(low, first, rest, raw, buckets)
    buckets[span].append((first, last))
    _split(last, high, rest, raw, buckets)


def floor_time(moment: datetime, span_s: int) -> datetime:
    """``moment`` rounded down to a whole bucket of ``span_s`` seconds (epoch-aligned)."""
    seconds = moment.timestamp()
    floored = datetime.fromtimestamp(seconds // span_s * span_s, UTC)
    return floored


def _ceil(moment: datetime, span_s: int) -> datetime:
    floored = floor_time(moment, span_s)
    return floored if floored == moment else floored + timedelta(seconds=span_s)


def _joined(ranges: list[Range]) -> tuple[Range, ...]:
    joined: list[Range] = []
    for low, high in sorted(ranges):
        if joined and joined[-1][1] == low:
            joined[-1] = (joined[-1][0], high)
        else:
            joined.append((low, high))
    return tuple(joined)


def settled_at(now: datetime, *, intervals: Iterable[timedelta]) -> datetime:
    """The evaluation time of a scheduled cycle run at ``now``: the last whole minute.

    A cycle at the last whole minute reads every window, baseline and sequential
    increment from the rollups alone (no partial minute at either end, and the
    exclusions it opens and closes start and end on minutes too); the price is that
    samples of the last minute wait for the next cycle, up to a minute. A rule whose
    interval is not a whole number of minutes would lose slots to it, so with such a
    rule the cycle runs at ``now`` as it is.

    Args:
        now: When the cycle runs.
        intervals: The rules' intervals.

    Returns:
        ``now`` floored to the minute, or ``now`` itself.
    """
    if any(interval.total_seconds() % MINUTE_S for interval in intervals):
        return now
    return floor_time(now, MINUTE_S)
