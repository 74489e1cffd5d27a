"""Chart geometry: time ticks on round steps, labelled in UTC; histograms on one scale."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from evalfleet.web.charts import MAX_TICKS, histogram, shared_top, time_ticks

START = datetime(2026, 11, 21, 10, 7, tzinfo=UTC)


@pytest.mark.parametrize("span, first, step_labels", [
    (timedelta(hours=1), "10:10", ["10:10", "10:20", "10:30", "10:40", "10:50", "11:00"]),
    (timedelta(hours=6), "11:00", ["11:00", "12:00", "13:00", "14:00", "15:00", "16:00"]),
    (timedelta(hours=24), "11-21 12:00", ["11-21 12:00", "11-21 15:00", "11-21 18:00"]),
    (timedelta(days=2), "11-21 12:00", ["11-21 12:00", "11-21 18:00", "11-22 00:00"]),
])
def test_ticks_fall_on_round_times(span: timedelta, first: str,
                                   step_labels: list[str]) -> None:
    ticks = time_ticks(START, START + span, width=720)
    labels = [tick.label for tick in ticks]
    assert labels[:len(step_labels)] == step_labels and labels[0] == first
    assert 3 <= len(ticks) <= MAX_TICKS
    assert all(0 <= tick.x <= 720 for tick in ticks)
    assert [tick.x for tick in ticks] == sorted(tick.x for tick in ticks)


def test_no_span_no_ticks() -> None:
    assert time_ticks(START, START, width=720) == []


def test_two_histograms_share_one_scale_and_carry_their_counts() -> None:
    window = [3, 0, 0, 0, 0, 0, 0, 0, 0, 1]  # 75% in the lowest bin
    baseline = [0, 0, 0, 0, 0, 10, 0, 0, 0, 10]  # 50% in each of two bins
    top = shared_top(window, baseline)
    assert top == 0.75
    bars_w = histogram(window, width=100, height=60, top_share=top)
    bars_b = histogram(baseline, width=100, height=60, top_share=top)
    assert (bars_w[0].height, bars_w[0].count) == (60.0, 3)
    assert (bars_w[9].height, bars_w[9].count) == (20.0, 1)
    # The baseline's tallest bar is two thirds of the window's: same scale, not its own.
    assert (bars_b[9].height, bars_b[9].count) == (40.0, 10)
    assert [b.count for b in bars_b] == [0, 0, 0, 0, 0, 10, 0, 0, 0, 10]
    assert shared_top([], []) == 1.0
    assert all(b.height == 0 for b in histogram([0] * 10, width=100, height=60,
                                                top_share=1.0))
