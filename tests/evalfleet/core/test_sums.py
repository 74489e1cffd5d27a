"""Running sums: both variance conventions, named, and merging."""

from __future__ import annotations

import math
import statistics

import pytest

from evalfleet.core.sums import RunningSums

VALUES = [0.2, 0.9, 0.4, 1.0, 0.0, 0.7]


def test_the_two_variances_are_the_sample_and_the_population_one() -> None:
    sums = RunningSums.of_values(VALUES)
    assert sums.n == 6 and sums.mean == pytest.approx(statistics.fmean(VALUES))
    assert sums.sample_variance == pytest.approx(statistics.variance(VALUES))
    assert sums.population_variance == pytest.approx(statistics.pvariance(VALUES))


@pytest.mark.parametrize("values", [[], [0.5]])
def test_fewer_than_two_values_have_no_spread(values: list[float]) -> None:
    sums = RunningSums.of_values(values)
    assert sums.sample_variance == 0.0 and sums.population_variance == 0.0
    assert math.isnan(sums.mean) if not values else sums.mean == 0.5


def test_rounding_never_makes_a_variance_negative() -> None:
    # Sums of squares below total^2 / n, as rounded sums of constant values can come out.
    sums = RunningSums(n=2, total=1.0, total_sq=0.4999999)
    assert sums.sample_variance == 0.0 and sums.population_variance == 0.0


def test_sums_of_disjoint_sets_add_up() -> None:
    first, second = RunningSums.of_values(VALUES[:2]), RunningSums.of_values(VALUES[2:])
    both = first.added(second)
    whole = RunningSums.of_values(VALUES)
    assert both.n == whole.n and both.total == pytest.approx(whole.total)
    assert both.sample_variance == pytest.approx(whole.sample_variance)
