"""Backpressure: the rate left at a queue depth, and which jobs still go in."""

from __future__ import annotations

import pytest

from producers.backpressure import keeps, rate_factor
from producers.sampler import is_sampled
from producers.selector import Pick


@pytest.mark.parametrize(("depth", "limit", "policy", "factor"), [
    (None, 100, "drop_new", 1.0), (5, None, "drop_new", 1.0), (99, 100, "drop_new", 1.0),
    (100, 100, "drop_new", 0.0), (500, 100, "drop_new", 0.0),
    (99, 100, "lower_rate", 1.0), (100, 100, "lower_rate", 1.0), (200, 100, "lower_rate", 0.5),
    (1000, 100, "lower_rate", 0.1),
])
def test_rate_factor(depth: int | None, limit: int | None, policy: str, factor: float) -> None:
    assert rate_factor(depth=depth, max_depth=limit, policy=policy) == factor  # type: ignore[arg-type]


def test_lowered_rate_keeps_a_nested_subset() -> None:
    ids = [f"req-{n}" for n in range(4000)]
    pick = Pick("m", "rate", 0.5, 0.0)
    kept_by_rate = {i for i in ids if is_sampled(i, 0.5, metric="m")}
    kept_lowered = {i for i in kept_by_rate if keeps(pick, sampling_key=i, factor=0.2)}
    assert kept_lowered < kept_by_rate
    assert kept_lowered == {i for i in ids if is_sampled(i, 0.1, metric="m")}


def test_segment_minimum_survives_lower_rate_but_not_drop_new() -> None:
    pick = Pick("m", "minimum", 0.01, 0.0)
    assert keeps(pick, sampling_key="x", factor=0.1)
    assert not keeps(pick, sampling_key="x", factor=0.0)
    assert keeps(Pick("m", "rate", 0.01, 0.0), sampling_key="x", factor=1.0)
