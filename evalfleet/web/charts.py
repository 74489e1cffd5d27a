"""Chart geometry for the page: numbers in, SVG coordinates out. Pure.

Every value that reaches the SVG is a number formatted here, so no text from a sample
or a judge can end up inside a drawing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

#: Steps between time ticks, in seconds, the smallest that gives at most
#: :data:`MAX_TICKS` ticks is used: 5, 10, 15, 30 minutes, 1, 2, 3, 6, 12 hours, a day.
TICK_STEPS_S = (300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)

#: Most time ticks on an axis.
MAX_TICKS = 8


@dataclass(frozen=True)
class Tick:
    """One labelled time on a chart's x axis."""

    x: float
    label: str


@dataclass(frozen=True)
class Bar:
    """One histogram bar: its box and what it counts."""

    x: float
    y: float
    width: float
    height: float
    label: str
    count: int = 0
    """Values in the bin, written above the bar."""


def polyline(values: Sequence[float | None], *, width: float, height: float,
             low: float = 0.0, high: float = 1.0) -> str:
    """SVG ``points`` for values spread evenly across ``width``; gaps skip a point.

    Values are placed on the ``low``..``high`` scale, top of the box at ``high``.
    """
    if not values:
        return ""
    step = width / max(1, len(values) - 1)
    spread = (high - low) or 1.0
    coordinates = []
    for index, value in enumerate(values):
        if value is None:
            continue
        y = height - (min(high, max(low, value)) - low) / spread * height
        coordinates.append(f"{index * step:.1f},{y:.1f}")
    return " ".join(coordinates)


def y_of(value: float | None, *, height: float, low: float = 0.0,
         high: float = 1.0) -> float | None:
    """The y coordinate of ``value`` in a box of ``height`` (None stays None)."""
    if value is None:
        return None
    spread = (high - low) or 1.0
    return round(height - (min(high, max(low, value)) - low) / spread * height, 1)


def histogram(counts: Sequence[int], *, width: float, height: float,
              top_share: float | None = None) -> list[Bar]:
    """Bars of the share of each bin's count in equal bins of 0..1.

    Args:
        counts: How many scores fell in each bin (the store's histogram bins).
        width: Width of the drawing.
        height: Height of the tallest possible bar.
        top_share: The share at the top of the scale (:func:`shared_top`, for histograms
            compared side by side); default the tallest bar of these counts.
    """
    bins = len(counts)
    total = sum(counts) or 1
    top = top_share or (max(counts) / total if any(counts) else 1.0)
    bar_width = width / max(1, bins)
    bars = []
    for index, count in enumerate(counts):
        bar_height = round(min(1.0, count / total / top) * height, 1)
        bars.append(Bar(x=round(index * bar_width + 1, 1), y=round(height - bar_height, 1),
                        width=round(bar_width - 2, 1), height=bar_height,
                        label=f"{index / bins:.1f}-{(index + 1) / bins:.1f}: {count}",
                        count=count))
    return bars


def shared_top(*groups: Sequence[int]) -> float:
    """The tallest share of one bin in any of the histograms ``groups`` (counts per
    bin): one scale for all of them (1.0 when every one is empty)."""
    shares = [max(counts) / sum(counts) for counts in groups if any(counts)]
    return max(shares, default=1.0)


def time_ticks(start: datetime, end: datetime, *, width: float) -> list[Tick]:
    """Round times between ``start`` and ``end`` (UTC) and where they fall on ``width``.

    Returns:
        At most :data:`MAX_TICKS` ticks, on a round step (see :data:`TICK_STEPS_S`),
        labelled ``HH:MM``, or ``MM-DD HH:MM`` when the span crosses a day.
    """
    span_s = (end - start).total_seconds()
    if span_s <= 0:
        return []
    step_s = next((s for s in TICK_STEPS_S if span_s / s <= MAX_TICKS), TICK_STEPS_S[-1])
    first = -(-int(start.timestamp()) // step_s) * step_s
    stamp = "%m-%d %H:%M" if start.astimezone(UTC).date() != end.astimezone(UTC).date() \
        else "%H:%M"
    ticks: list[Tick] = []
    moment = datetime.fromtimestamp(first, UTC)
    while moment <= end and len(ticks) < MAX_TICKS + 1:
        x = (moment - start).total_seconds() / span_s * width
        ticks.append(Tick(x=round(x, 1), label=moment.strftime(stamp)))
        moment += timedelta(seconds=step_s)
    return ticks
