"""Which metrics keep a sample: per-metric rates within binomial bounds, stable across
runs and nested; filters; segment minimums."""

from __future__ import annotations

import math

import pytest

from producers.quota import SegmentQuota
from producers.selector import NO_SEGMENT, segment_of, select
from tests.producers.builders import APPS, policy

IDS = [f"req-{n}" for n in range(20_000)]

RATES = policy("""
metrics:
  a: {rate: 0.05}
  b: {rate: 0.10}
  c: {rate: 0.5, where: {app: support-bot}}
""")


def kept(metric: str, ids: list[str], *, rate: float | None = None,
         app: str = "support-bot") -> set[str]:
    quota = SegmentQuota(max_tracked=100)
    return {i for i in ids if select(sample_id=i, attributes={"app": app}, metrics=[metric],
                                     policy=RATES, quota=quota, now_s=0.0, rate=rate).picks}


@pytest.mark.parametrize(("metric", "rate"), [("a", 0.05), ("b", 0.10), ("c", 0.5)])
def test_each_metric_holds_its_rate_within_binomial_bounds(metric: str, rate: float) -> None:
    n = len(IDS)
    sigma = math.sqrt(n * rate * (1 - rate))
    assert abs(len(kept(metric, IDS)) - n * rate) < 4 * sigma


def test_stable_across_runs_nested_within_a_metric_independent_across_metrics() -> None:
    first, second = kept("a", IDS), kept("a", IDS)
    assert first == second
    assert first < kept("a", IDS, rate=0.10)  # kept at 5% implies kept at 10%
    # Each metric's hash is salted with its name: a's 5% and b's 10% overlap on about
    # 0.5% of the ids (100 of 20,000, sd about 10), not on all of a's.
    assert 60 < len(first & kept("b", IDS)) < 140


def test_per_call_rate_overrides() -> None:
    assert kept("a", IDS[:2000], rate=1.0) == set(IDS[:2000])
    assert kept("a", IDS[:2000], rate=0.0) == set()


def test_filtered_out_is_not_sampled_out() -> None:
    selection = select(sample_id="req-1", attributes={"app": "hr"}, metrics=["c", "b"],
                       policy=RATES, quota=SegmentQuota(max_tracked=10), now_s=0.0, rate=1.0)
    assert selection.filtered_out == ("c",)
    assert [p.metric for p in selection.picks] == ["b"]


def test_segment_minimum_keeps_the_first_n_of_each_segment() -> None:
    low = policy("""
defaults: {rate: 0.0, minimum_per_segment: 3}
segments: {by: [app], window_s: 3600}
metrics: {m: {}}
""")
    quota = SegmentQuota(max_tracked=100)
    picks = []
    for n in range(30):
        selection = select(sample_id=f"id-{n}", attributes={"app": APPS[n % 3]},
                           metrics=["m"], policy=low, quota=quota, now_s=100.0)
        picks.extend((selection.segment, p.kept_by) for p in selection.picks)
    assert sorted(picks) == sorted((f"app={app}", "minimum") for app in APPS for _ in range(3))
    # The next window keeps three more of each.
    selection = select(sample_id="id-x", attributes={"app": "hr-assistant"}, metrics=["m"],
                       policy=low, quota=quota, now_s=3700.0)
    assert [p.kept_by for p in selection.picks] == ["minimum"]


def test_minimum_counts_samples_kept_by_rate_too() -> None:
    both = policy("defaults: {rate: 1.0, minimum_per_segment: 2}\nmetrics: {m: {}}")
    quota = SegmentQuota(max_tracked=10)
    kinds = [select(sample_id=f"id-{n}", attributes={}, metrics=["m"], policy=both, quota=quota,
                    now_s=0.0).picks[0].kept_by for n in range(3)]
    assert kinds == ["rate", "rate", "rate"]
    assert len(quota) == 1


@pytest.mark.parametrize(("attributes", "keys", "label"), [
    ({"app": "a", "route": "/r", "x": "1"}, ("app", "route"), "app=a,route=/r"),
    ({"route": "/r"}, ("app", "route"), "route=/r"),
    ({}, ("app",), NO_SEGMENT),
])
def test_segment_labels(attributes: dict[str, str], keys: tuple[str, ...], label: str) -> None:
    assert segment_of(attributes, keys) == label
