"""Which parts of a window to read from the rollups, and which from the score rows.

A window ``[start, end)`` on sample time is cut at its ends and at every time where a
baseline exclusion begins or ends (those are cycle times, rarely on a minute). Each
piece then has hours in its middle, minutes either side of them, and at its ends the
seconds before the first whole minute and after the last: those seconds are read from
the score rows, the rest from the rollups (``evalfleet.store.rollup``). Every bucket read
is then wholly inside or wholly outside each exclusion, so excluding a bucket by its start
is exact. Pure: times in, ranges out.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

#: The rollups' buckets, longest first (``evalfleet.store.rollup.BUCKET_SPANS_S``).
SPANS_S = (3600, 60)

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
    first, last = _ceil(low, span), _floor(high, span)
    if first >= last:
        _split(low, high, rest, raw, buckets)
        return
    _split(low, first, rest, raw, buckets)
    buckets[span].append((first, last))
    _split(last, high, rest, raw, buckets)


def _floor(moment: datetime, span_s: int) -> datetime:
    seconds = moment.timestamp()
    floored = datetime.fromtimestamp(seconds // span_s * span_s, UTC)
    return floored


def _ceil(moment: datetime, span_s: int) -> datetime:
    floored = _floor(moment, span_s)
    return floored if floored == moment else floored + timedelta(seconds=span_s)


def _joined(ranges: list[Range]) -> tuple[Range, ...]:
    joined: list[Range] = []
    for low, high in sorted(ranges):
        if joined and joined[-1][1] == low:
            joined[-1] = (joined[-1][0], high)
        else:
            joined.append((low, high))
    return tuple(joined)
