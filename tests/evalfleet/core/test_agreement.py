"""Agreement statistics: known values, a reference implementation, interval coverage."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score

from evalfleet.core.agreement import agreement, cohen_kappa

LIKERT = (1.0, 2.0, 3.0, 4.0, 5.0)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("quadratic", [False, True])
def test_kappa_matches_scikit_learn(seed: int, quadratic: bool) -> None:
    rng = np.random.default_rng(seed)
    people = rng.integers(1, 6, 150).astype(float)
    judge = np.clip(people + rng.integers(-2, 3, 150), 1, 5)
    ours = cohen_kappa(judge, people, categories=LIKERT, quadratic=quadratic)
    theirs = cohen_kappa_score(people, judge, labels=list(LIKERT),
                               weights="quadratic" if quadratic else None)
    assert ours == pytest.approx(theirs, abs=1e-12)


def test_kappa_known_values() -> None:
    same = np.array([0.0, 1.0, 1.0, 0.0])
    assert cohen_kappa(same, same, categories=(0.0, 1.0)) == 1.0
    assert cohen_kappa(same, 1 - same, categories=(0.0, 1.0)) == -1.0
    # Both raters used one category only: agreement by chance is total, kappa undefined.
    ones = np.ones(4)
    assert math.isnan(cohen_kappa(ones, ones, categories=(0.0, 1.0)))


def test_binary_report_has_kappa_accuracy_and_confusion() -> None:
    judge = [1, 1, 0, 0, 1, 0, None, 1]
    people = [1, 0, 0, 0, 1, 1, 1, None]
    result = agreement(judge, people, kind="binary")
    assert (result.pairs, result.skipped) == (6, 2)
    assert result.confusion == [[2, 1], [1, 2]]  # rows: people false/true; columns: judge
    assert result.statistics["accuracy"].value == pytest.approx(4 / 6)
    assert result.statistics["kappa"].value == pytest.approx(1 / 3)


def test_continuous_report_has_spearman_mae_and_bias() -> None:
    people = [0.1, 0.4, 0.5, 0.9, 0.7]
    judge = [0.2, 0.5, 0.6, 1.0, 0.8]  # the same ranking, 0.1 higher everywhere
    result = agreement(judge, people, kind="continuous")
    stats = result.statistics
    assert stats["spearman"].value == pytest.approx(1.0)
    assert stats["mae"].value == pytest.approx(0.1)
    assert stats["bias"].value == pytest.approx(0.1)


def test_ordinal_report_needs_categories() -> None:
    with pytest.raises(ValueError, match="categories"):
        agreement([1, 2], [1, 2], kind="ordinal")
    result = agreement([1, 2, 3, 4, 5, 5], [1, 2, 3, 4, 5, 4], kind="ordinal", categories=LIKERT)
    assert set(result.statistics) == {"weighted_kappa", "spearman"}
    assert result.statistics["weighted_kappa"].value == pytest.approx(
        cohen_kappa_score([1, 2, 3, 4, 5, 4], [1, 2, 3, 4, 5, 5], weights="quadratic"))


def test_undefined_statistics_are_none_not_a_number() -> None:
    result = agreement([1.0, 1.0, 1.0], [1.0, 1.0, 1.0], kind="continuous")
    assert result.statistics["spearman"].value is None
    assert result.statistics["mae"].value == 0.0
    single = agreement([0.5], [0.4], kind="continuous")
    assert single.statistics["mae"] == single.statistics["mae"].__class__(None)


def test_lengths_must_match() -> None:
    with pytest.raises(ValueError, match="2 judge values against 3"):
        agreement([1, 0], [1, 0, 1], kind="binary")


def test_intervals_are_reproducible_with_a_seed() -> None:
    rng = np.random.default_rng(3)
    people = list(rng.random(40))
    judge = [p + 0.05 for p in people]
    first = agreement(judge, people, kind="continuous", seed=11, n_resamples=300)
    again = agreement(judge, people, kind="continuous", seed=11, n_resamples=300)
    assert first == again


def test_kappa_intervals_cover_the_true_value_at_about_the_stated_rate() -> None:
    # People say yes half the time; the judge agrees with them 85% of the time, so the
    # population kappa is (0.85 - 0.5) / (1 - 0.5) = 0.7.
    rng = np.random.default_rng(2026)
    covered = 0
    runs = 120
    for run in range(runs):
        people = rng.integers(0, 2, 80)
        judge = np.where(rng.random(80) < 0.85, people, 1 - people)
        estimate = agreement(list(judge), list(people), kind="binary", seed=run,
                             n_resamples=400).statistics["kappa"]
        assert estimate.low is not None and estimate.high is not None
        covered += estimate.low <= 0.7 <= estimate.high
    assert 0.88 <= covered / runs <= 0.99, covered


def test_bias_intervals_cover_the_true_value_at_about_the_stated_rate() -> None:
    rng = np.random.default_rng(7)
    covered = 0
    runs = 120
    for run in range(runs):
        people = rng.random(50)
        judge = people + 0.1 + rng.normal(0, 0.1, 50)  # true bias 0.1
        estimate = agreement(list(judge), list(people), kind="continuous", seed=run,
                             n_resamples=400).statistics["bias"]
        assert estimate.low is not None and estimate.high is not None
        covered += estimate.low <= 0.1 <= estimate.high
    assert 0.88 <= covered / runs <= 0.99, covered
