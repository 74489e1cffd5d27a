"""Chart geometry: time ticks on round steps, labelled in UTC."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from evalfleet.web.charts import MAX_TICKS, time_ticks

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
