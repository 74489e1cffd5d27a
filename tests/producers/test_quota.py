"""Segment minimums: the first N per segment and window, with bounded state."""

from __future__ import annotations

from producers.quota import SegmentQuota

HOUR_S = 3600.0


def take(quota: SegmentQuota, segment: str, now_s: float, *, minimum: int = 2,
         metric: str = "m") -> bool:
    return quota.take(metric=metric, segment=segment, minimum=minimum, window_s=HOUR_S,
                      now_s=now_s)


def test_first_n_per_window() -> None:
    quota = SegmentQuota(max_tracked=10)
    assert [take(quota, "a", 10.0) for _ in range(4)] == [True, True, False, False]
    assert take(quota, "b", 10.0)  # another segment counts on its own
    assert take(quota, "a", 10.0, metric="other")  # so does another metric
    assert take(quota, "a", HOUR_S + 1)  # a new window starts over
    assert take(quota, "a", HOUR_S + 2) and not take(quota, "a", HOUR_S + 3)


def test_zero_minimum_keeps_nothing_and_tracks_nothing() -> None:
    quota = SegmentQuota(max_tracked=10)
    assert not take(quota, "a", 0.0, minimum=0)
    assert len(quota) == 0


def test_state_is_bounded_least_recently_seen_forgotten() -> None:
    quota = SegmentQuota(max_tracked=3)
    for segment in "abcd":
        take(quota, segment, 1.0)
        take(quota, segment, 1.0)
    assert len(quota) == 3
    assert take(quota, "b", 1.0) is False  # b still counted: 2 of 2 used
    assert take(quota, "a", 1.0) is True   # a was forgotten: counts from 0 again
    quota.resize(1)
    assert len(quota) == 1
