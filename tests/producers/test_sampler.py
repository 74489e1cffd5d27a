"""Sampling by id: deterministic, nested, and at the rate asked for."""

from __future__ import annotations

import math

import pytest

from producers.sampler import id_fraction, is_sampled

IDS = [f"req-{n}" for n in range(20_000)]


def test_deterministic() -> None:
    assert [id_fraction(i) for i in IDS[:100]] == [id_fraction(i) for i in IDS[:100]]


@pytest.mark.parametrize("rate", [0.01, 0.05, 0.1, 0.5, 0.9])
def test_rate_within_binomial_bounds(rate: float) -> None:
    kept = sum(is_sampled(i, rate) for i in IDS)
    n = len(IDS)
    sigma = math.sqrt(n * rate * (1 - rate))
    assert abs(kept - n * rate) < 4 * sigma


def test_rates_nest() -> None:
    low = {i for i in IDS if is_sampled(i, 0.05)}
    high = {i for i in IDS if is_sampled(i, 0.10)}
    assert low and low < high


def test_edges() -> None:
    assert not any(is_sampled(i, 0.0) for i in IDS[:1000])
    assert all(is_sampled(i, 1.0) for i in IDS[:1000])
