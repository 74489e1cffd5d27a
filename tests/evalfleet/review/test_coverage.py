"""Corrected intervals hold their level for stratified slices, or say which stratum lacks
labels: seeded simulations at the estimator level (bench/review_coverage.py runs more)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import t

from evalfleet.core.estimator import StratumLabels, lacking_labels, t_quantile
from testkit.coverage_simulation import Design, simulate

#: Runs per simulated design: a share of 0.9 is within about 1.7 points at 300.
RUNS = 300


@pytest.mark.parametrize(("strata", "lacking"), [
    ([StratumLabels("'rest' at rate 0.25", 250, 250)], None),
    ([StratumLabels("'rest' at rate 0.1", 64, 70)], "64 of 100 labels"),
    ([StratumLabels("'below 0.5' at rate 0.5", 200, 210),
      StratumLabels("'rest' at rate 0.06", 12, 12)],
     "stratum 'rest' at rate 0.06 has 12 of 30 labels"),
    ([StratumLabels("'below 0.5' at rate 0.5", 40, 40),
      StratumLabels("'rest' at rate 0.06", 3, 20)],
     "43 of 100 labels; stratum 'rest' at rate 0.06 has 3 of 30 labels"),
    # A stratum whose random items are all unlabelled still needs its labels.
    ([StratumLabels("'below 0.5' at rate 0.5", 300, 300),
      StratumLabels("'rest' at rate 0.06", 0, 25)],
     "stratum 'rest' at rate 0.06 has 0 of 30 labels"),
])
def test_lacking_labels_names_the_stratum(strata: list[StratumLabels],
                                          lacking: str | None) -> None:
    assert lacking_labels(strata) == lacking


def coverage(design: Design, *, seed: int) -> tuple[float, float, float]:
    """Share refused, share held among the rest, and share held under the rule of 100
    labels in all (no stratum minimum)."""
    rng = np.random.default_rng(seed)
    runs = [simulate(design, rng) for _ in range(RUNS)]
    kept = [run for run in runs if run.lacking is None]
    before = [run for run in runs if not run.lacking_overall]
    return (1 - len(kept) / RUNS, sum(r.held for r in kept) / max(len(kept), 1),
            sum(r.held for r in before) / max(len(before), 1))


def test_a_stratified_slice_holds_its_level() -> None:
    refused, held, _ = coverage(Design("stratified", "continuous", 3000, 3000, 0.5, 0.06),
                                seed=3)
    assert refused == 0.0
    assert 0.86 <= held <= 0.94


def test_a_thin_heavy_stratum_is_refused_and_named() -> None:
    design = Design("thin", "yes/no", 400, 400, 0.5, 0.06)
    refused, _, before = coverage(design, seed=4)
    assert refused == 1.0
    run = simulate(design, np.random.default_rng(5))
    assert run.lacking is not None and "stratum 'rest' at rate 0.06 has" in run.lacking
    # What the minimum of 100 labels in all let through held too rarely.
    assert before < 0.86


def test_the_runs_a_stratum_minimum_lets_through_hold_their_level() -> None:
    # About half the runs have 30 labels in the heavy stratum.
    refused, held, _ = coverage(Design("half", "yes/no", 1000, 1000, 0.5, 0.06), seed=6)
    assert 0.2 < refused < 0.8
    assert 0.86 <= held <= 0.94


@pytest.mark.parametrize("df", [5, 10, 29, 200])
@pytest.mark.parametrize("level", [0.9, 0.95, 0.975, 0.995])
def test_the_t_quantile_matches_scipy(df: int, level: float) -> None:
    assert t_quantile(level, df) == pytest.approx(t.ppf(level, df), abs=4e-3 if df < 10 else 1e-4)
