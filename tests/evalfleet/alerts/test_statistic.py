"""The tests per score kind: agreement with scipy, one-sidedness, and error rates by simulation."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from evalfleet.alerts.statistic import (
    Summary,
    benjamini_hochberg,
    compare_with_baseline,
    compare_with_threshold,
    mann_whitney_u_test,
    proportion_test,
    welch_t_test,
    wilson_interval,
)

RNG_SEED = 20261121


def summary(values: np.ndarray | list[float], *, levels: bool = False) -> Summary:
    return Summary.of_values(list(values), with_levels=levels)


def test_welch_matches_scipy_on_raw_values() -> None:
    rng = np.random.default_rng(RNG_SEED)
    current, baseline = rng.normal(0.8, 0.1, 60), rng.normal(0.85, 0.15, 400)
    result = welch_t_test(summary(current), summary(baseline), direction="decrease")
    expected = stats.ttest_ind(current, baseline, equal_var=False, alternative="less")
    assert result.p_value == pytest.approx(expected.pvalue, rel=1e-9)
    assert result.effect == pytest.approx(baseline.mean() - current.mean())


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("direction,alternative", [("decrease", "less"), ("increase", "greater")])
def test_mann_whitney_from_counts_matches_scipy(seed: int, direction: str,
                                                alternative: str) -> None:
    rng = np.random.default_rng(seed)
    current = (rng.integers(1, 6, rng.integers(8, 80)) - 1) / 4
    baseline = (rng.integers(1, 6, rng.integers(8, 300)) - 1) / 4
    result = mann_whitney_u_test(summary(current, levels=True), summary(baseline, levels=True),
                                 direction=direction)  # type: ignore[arg-type]
    expected = stats.mannwhitneyu(current, baseline, alternative=alternative,
                                  method="asymptotic")
    assert result.statistic == pytest.approx(expected.statistic)
    assert result.p_value == pytest.approx(expected.pvalue, rel=1e-9)


def test_small_counts_use_fishers_exact_test_and_large_ones_the_z_test() -> None:
    small = proportion_test(summary([1, 1, 0, 0, 0]), summary([1] * 9 + [0]),
                            direction="decrease", confidence=0.95)
    assert small.test == "fisher_exact"
    expected = stats.fisher_exact([[2, 3], [9, 1]], alternative="less")
    assert small.p_value == pytest.approx(expected.pvalue)
    large = proportion_test(summary([1] * 60 + [0] * 40), summary([1] * 800 + [0] * 200),
                            direction="decrease", confidence=0.95)
    assert large.test == "two_proportion_z" and large.p_value < 0.001
    assert large.interval == pytest.approx(wilson_interval(60, 100, confidence=0.95))
    assert large.interval[1] < large.baseline_interval[0]  # type: ignore[index]


def test_wilson_interval_by_formula() -> None:
    z = stats.norm.ppf(0.975)
    n, p = 40, 12 / 40
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert wilson_interval(12, 40, confidence=0.95) == pytest.approx((centre - half,
                                                                      centre + half))


@pytest.mark.parametrize("kind,low,high", [
    ("continuous", [0.5] * 20 + [0.6] * 20, [0.85, 0.95] * 100),
    ("binary", [0.0] * 30 + [1.0] * 10, [1.0] * 150 + [0.0] * 50),
    ("ordinal", [0.0, 0.25] * 20, [0.75, 1.0] * 100),
])
def test_a_rise_never_breaches_a_decrease_and_vice_versa(kind: str, low: list[float],
                                                         high: list[float]) -> None:
    with_levels = kind == "ordinal"
    rising = compare_with_baseline(kind, current=summary(high, levels=with_levels),
                                   baseline=summary(low, levels=with_levels),
                                   direction="decrease", confidence=0.95)
    assert rising.p_value > 0.99 and rising.effect < 0
    falling = compare_with_baseline(kind, current=summary(low, levels=with_levels),
                                    baseline=summary(high, levels=with_levels),
                                    direction="decrease", confidence=0.95)
    assert falling.p_value < 1e-6 and falling.effect > 0.3
    against_rise = compare_with_baseline(kind, current=summary(high, levels=with_levels),
                                         baseline=summary(low, levels=with_levels),
                                         direction="increase", confidence=0.95)
    assert against_rise.p_value < 1e-6


@pytest.mark.parametrize("kind", ["continuous", "ordinal", "binary"])
def test_threshold_fires_on_the_confidence_bound_not_the_point_estimate(kind: str) -> None:
    # The mean is below 0.7, but with 12 samples the bound is not.
    values = [0.5, 0.75, 1.0, 0.5, 0.75, 0.75, 0.5, 0.75, 0.5, 1.0, 0.5, 0.5]
    if kind == "binary":
        values = [1.0] * 7 + [0.0] * 5
    result = compare_with_threshold(kind, current=summary(values), threshold=0.7,
                                    direction="decrease", confidence=0.95)
    assert result.effect > 0  # point estimate is past the threshold
    assert result.bound is not None and result.bound > 0.7
    assert result.p_value > 0.05
    many = compare_with_threshold(kind, current=summary(values * 40), threshold=0.7,
                                  direction="decrease", confidence=0.95)
    assert many.bound is not None and many.bound < 0.7 and many.p_value < 0.05


def test_benjamini_hochberg_step_up() -> None:
    assert benjamini_hochberg([0.001, 0.02, 0.04, 0.5], rate=0.05) == [True, True, False, False]
    assert benjamini_hochberg([0.04, 0.03, 0.02, 0.01], rate=0.05) == [True] * 4
    assert benjamini_hochberg([], rate=0.05) == []


def _cycle_p_values(rng: np.random.Generator, *, means: np.ndarray, n_window: int = 40,
                   n_base: int = 200) -> np.ndarray:
    """One-sided Welch p-values of one cycle, one per segment (vectorised scipy, the same
    test as ``welch_t_test``, which matches scipy above)."""
    current = rng.normal(means[:, None], 0.1, (len(means), n_window))
    baseline = rng.normal(0.85, 0.1, (len(means), n_base))
    return stats.ttest_ind(current, baseline, axis=1, equal_var=False, alternative="less").pvalue


def test_hundreds_of_null_segments_give_almost_no_false_alerts() -> None:
    """300 null segments per cycle: any false alarm in under ~5% of cycles with BH,
    in nearly every cycle without it."""
    rng = np.random.default_rng(RNG_SEED)
    cycles = 200
    with_bh = without_bh = 0
    for _ in range(cycles):
        p_values = _cycle_p_values(rng, means=np.full(300, 0.85))
        with_bh += any(benjamini_hochberg(list(p_values), rate=0.05))
        without_bh += bool((p_values < 0.05).any())
    assert with_bh / cycles <= 0.08
    assert without_bh / cycles > 0.99


def test_a_real_drop_among_hundreds_of_null_segments_is_found_at_the_promised_fdr() -> None:
    rng = np.random.default_rng(RNG_SEED + 1)
    cycles = 200
    found, false_share = 0, []
    for _ in range(cycles):
        means = np.append(np.full(300, 0.85), 0.70)  # the last segment really dropped
        rejected = benjamini_hochberg(list(_cycle_p_values(rng, means=means)), rate=0.05)
        found += rejected[-1]
        false_share.append(sum(rejected[:-1]) / max(1, sum(rejected)))
    assert found == cycles
    assert float(np.mean(false_share)) <= 0.08  # BH's guarantee: false discovery rate 5%
