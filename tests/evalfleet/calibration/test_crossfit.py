"""Cross-fitted cascade thresholds: folds by a salted hash, each fold fitted without its
own labels, and the corrected estimate's coverage when the labels that fit the
thresholds also correct the cascade's scores (seeded simulations at the estimator level)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from evalfleet.calibration.cascade import Guarantee
from evalfleet.calibration.crossfit import crossfit_cascade, rescored_labels
from evalfleet.core.cascade import fold_of
from evalfleet.core.estimator import corrected_mean
from evalfleet.core.labelpool import PoolItem
from evalfleet.core.metric import load_registry
from evalfleet.core.rescore import TierJudgement, kept_scores, rescored_pool
from evalfleet.core.sums import RunningSums
from testkit.cascade import TRUE_MEAN, cascade_traffic
from tests.helpers import cascade_metrics

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
        window = RunningSums(len(judged), sum(judged), sum(f * f for f in judged))
        labels = rescored_labels(simulated.labelled, metric="m", score="correct", fit=fit,
                                 probabilities={item.sample_id: 0.15
                                                for item in simulated.labelled})
        interval = corrected_mean(window, window, labels, confidence=0.9).interval
        held += interval.low <= TRUE_MEAN <= interval.high
    assert held / runs >= 0.85, f"held in {held} of {runs}"


def test_a_pool_is_rescored_with_each_item_s_fold_thresholds(tmp_path: Path) -> None:
    """Random items keep the scores their fold's thresholds give (the small tier's where
    it is confident enough, else the large tier's); an item lacking a tier loses its judge
    scores and, labelled, is counted; a chosen item is left as it was."""
    metric = load_registry(cascade_metrics(tmp_path / "metrics")).get("bbh_match")
    record = {"tried": [
        {"tier": 1, "model": "small", "scores": {"correct": 1.0}, "confidence": 0.9},
        {"tier": 2, "model": "large", "scores": {"correct": 0.0}, "confidence": 0.99}]}
    ids = ["a", "b", "c", "d", "e", "f"]
    assert {fold_of(metric="bbh_match", sample_id=i, folds=2) for i in ids} == {0, 1}
    folds = ((0.8, None), (0.95, None))  # fold 1's small tier never reaches 0.95

    def item(sample_id: str, *, reason: str = "random", cascade: object = record) -> PoolItem:
        return PoolItem(id=0, sample_id=sample_id, reason=reason, probability=1.0,
                        stratum=None, judge_scores={"correct": 0.5}, attributes={},
                        labels={"correct": [1]}, cascade=cascade)  # type: ignore[arg-type]

    found = rescored_pool([item(i) for i in ids] + [
        item("gone", cascade=None), item("chosen", reason="chosen")],
        metric=metric, folds=folds)
    for sample_id, rescored in zip(ids, found.items, strict=False):
        fold = fold_of(metric="bbh_match", sample_id=sample_id, folds=2)
        assert rescored.judge_scores == {"correct": 1.0 if fold == 0 else 0.0}
    assert found.items[-2].judge_scores == {} and found.not_rescored == 1
    assert found.items[-1].judge_scores == {"correct": 0.5}
