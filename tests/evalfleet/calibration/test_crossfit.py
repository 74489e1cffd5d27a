"""Cross-fitted cascade thresholds: folds by a salted hash, each fold fitted without its
own labels, and the corrected estimate's coverage when the labels that fit the
thresholds also correct the cascade's scores (seeded simulations at the estimator level)."""

from __future__ import annotations

import random

import pytest

from evalfleet.calibration.cascade import Guarantee, TierJudgement
from evalfleet.calibration.crossfit import crossfit_cascade, kept_scores, rescored_labels
from evalfleet.core.cascade import fold_of
from evalfleet.review.estimator import Moments, corrected_mean
from testkit.cascade import TRUE_MEAN, cascade_traffic

KINDS = {"correct": "binary"}


def test_folds_are_a_salted_hash_of_the_sample_id() -> None:
    folds = [fold_of(metric="m", sample_id=f"s{n}", folds=5) for n in range(5000)]
    assert set(folds) == {0, 1, 2, 3, 4}
    assert all(800 < folds.count(k) < 1200 for k in range(5))
    assert fold_of(metric="m", sample_id="s1", folds=5) == folds[1]  # stable
    assert [fold_of(metric="other", sample_id=f"s{n}", folds=5) for n in range(50)] != folds[:50]
    with pytest.raises(ValueError, match="at least 1"):
        fold_of(metric="m", sample_id="s1", folds=0)


def test_each_fold_is_fitted_without_its_own_labels_at_delta_over_k() -> None:
    rng = random.Random(7)
    labelled = cascade_traffic(rng, seed=0, n=5000, rate=0.3).labelled
    fit = crossfit_cascade(labelled, metric="m", folds=3, kinds=KINDS, guarantee=Guarantee())
    assert len(fit.folds) == 3
    for k, fold in enumerate(fit.folds):
        outside = [item for item in labelled
                   if fold_of(metric="m", sample_id=item.sample_id, folds=3) != k]
        assert fold.items == len(outside)
        assert fold.guarantee.delta == pytest.approx(0.05 / 3)
        assert fold.tiers[0].threshold is not None  # a calibrated small judge settles some
    with pytest.raises(ValueError, match="at least 2 folds"):
        crossfit_cascade(labelled, metric="m", folds=1, kinds=KINDS, guarantee=Guarantee())


@pytest.mark.parametrize(("thresholds", "kept"), [
    ((0.9, None), 1.0),    # the small tier is sure enough: its verdict
    ((0.99, None), 0.0),   # it is not: the last tier's, low-confidence
    ((None, None), 0.0),   # nothing fitted: the last tier's
])
def test_kept_scores_are_the_worker_s(thresholds: tuple[float | None, ...],
                                      kept: float) -> None:
    tiers = (TierJudgement({"correct": 1.0}, 0.95), TierJudgement({"correct": 0.0}, 0.5))
    assert kept_scores(tiers, thresholds) == {"correct": kept}


def test_corrected_means_cover_when_the_fit_s_labels_also_correct() -> None:
    # Every verdict of fold k is judged with thresholds fitted on the other folds' labels;
    # the same labels then correct the cascade's mean. Over 200 seeded runs the 90%
    # interval holds people's mean about as often as it says.
    runs, held = 200, 0
    for seed in range(runs):
        rng = random.Random(seed)
        simulated = cascade_traffic(rng, seed=seed)
        fit = crossfit_cascade(simulated.labelled, metric="m", folds=2, kinds=KINDS,
                               guarantee=Guarantee())
        judged = []
        for item in simulated.items:
            fold = fold_of(metric="m", sample_id=item.sample_id, folds=2)
            kept = kept_scores(item.tiers, fit.folds[fold].thresholds)
            assert kept is not None
            judged.append(float(kept["correct"] or 0.0))
        window = Moments(len(judged), sum(judged), sum(f * f for f in judged))
        labels = rescored_labels(simulated.labelled, metric="m", score="correct", fit=fit,
                                 probabilities={item.sample_id: 0.15
                                                for item in simulated.labelled})
        interval = corrected_mean(window, window, labels, confidence=0.9).interval
        held += interval.low <= TRUE_MEAN <= interval.high
    assert held / runs >= 0.85, f"held in {held} of {runs}"
