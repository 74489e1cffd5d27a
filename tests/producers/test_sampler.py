"""Sampling by id: deterministic, nested, at the rate asked for, and salted per metric."""

from __future__ import annotations

import math

import pytest

from producers.dispatcher import shadows
from producers.sampler import id_fraction, is_sampled, sampling_fraction

IDS = [f"req-{n}" for n in range(20_000)]


def test_deterministic() -> None:
    assert ([sampling_fraction(i, metric="m") for i in IDS[:100]]
            == [sampling_fraction(i, metric="m") for i in IDS[:100]])


@pytest.mark.parametrize("rate", [0.01, 0.05, 0.1, 0.5, 0.9])
def test_rate_within_binomial_bounds(rate: float) -> None:
    kept = sum(is_sampled(i, rate, metric="m") for i in IDS)
    n = len(IDS)
    sigma = math.sqrt(n * rate * (1 - rate))
    assert abs(kept - n * rate) < 4 * sigma


def test_rates_nest() -> None:
    low = {i for i in IDS if is_sampled(i, 0.05, metric="m")}
    high = {i for i in IDS if is_sampled(i, 0.10, metric="m")}
    assert low and low < high


def test_edges() -> None:
    assert not any(is_sampled(i, 0.0, metric="m") for i in IDS[:1000])
    assert all(is_sampled(i, 1.0, metric="m") for i in IDS[:1000])


def test_the_hash_is_salted_by_purpose_and_metric() -> None:
    # Two metrics at 50% keep independent halves: they share about a quarter of the ids
    # (sd about 61 over 20,000), as do a metric's sample and the shadow share, and the
    # plain id hash (unsalted) is neither.
    a = {i for i in IDS if is_sampled(i, 0.5, metric="a")}
    b = {i for i in IDS if is_sampled(i, 0.5, metric="b")}
    shadowed = {i for i in IDS if shadows(i, share=0.5)}
    plain = {i for i in IDS if id_fraction(i) < 0.5}
    for other in (b, shadowed, plain):
        assert abs(len(a & other) - 5_000) < 300
    assert sampling_fraction("req-1", metric="a") == id_fraction("sample\x1fa\x1freq-1")
