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


def test_new_segments_past_the_cap_get_no_minimum_and_are_counted() -> None:
    quota = SegmentQuota(max_tracked=1000)
    capped: list[int] = []

    def varied(n: int, now_s: float) -> bool:
        return quota.take(metric="m", segment=f"route=/r{n}", minimum=5, window_s=HOUR_S,
                          now_s=now_s, max_new=3, on_capped=lambda: capped.append(n))

    assert [varied(n, 10.0) for n in range(10)] == [True] * 3 + [False] * 7
    assert capped == list(range(3, 10)) and quota.capped == {"m": 7}
    assert varied(0, 11.0)  # a segment already counting goes on
    assert varied(99, HOUR_S + 1)  # a new window admits new segments again
    assert quota.take(metric="other", segment="route=/x", minimum=5, window_s=HOUR_S,
                      now_s=10.0, max_new=3)  # per metric
