"""Live agreement against scikit-learn on the same labels, weights and all."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, cohen_kappa_score, mean_absolute_error

from evalfleet.core.live_agreement import REVIEWERS, Pair, live_agreement, pair_statistics
from evalfleet.core.metric import load_registry
from evalfleet.store.queries.review_queue import ReviewItem, ReviewLabel

NOW = datetime(2026, 11, 22, tzinfo=UTC)
RESAMPLES = 300


def weights(rng: np.random.Generator, n: int) -> np.ndarray:
    """Inverse inclusion probabilities of a stratified slice (5% and 40%)."""
    return 1.0 / rng.choice([0.05, 0.4], size=n)


def test_binary_agreement_matches_scikit_learn() -> None:
    rng = np.random.default_rng(3)
    people = rng.integers(0, 2, 300).astype(float)
    judge = np.where(rng.random(300) < 0.8, people, 1 - people)
    w = weights(rng, 300)
    pairs = [Pair(j, p, j, p, weight=x) for j, p, x in zip(judge, people, w, strict=True)]
    found = pair_statistics(pairs, kind="binary", n_resamples=RESAMPLES)
    assert found["kappa"].value == pytest.approx(
        cohen_kappa_score(judge, people, sample_weight=w))
    assert found["accuracy"].value == pytest.approx(
        accuracy_score(people, judge, sample_weight=w))
    for estimate in found.values():
        assert estimate.low is not None and estimate.high is not None
        assert estimate.low <= estimate.value <= estimate.high  # type: ignore[operator]


def test_ordinal_agreement_matches_scikit_learn() -> None:
    rng = np.random.default_rng(4)
    people = rng.integers(1, 6, 250).astype(float)
    judge = np.clip(people + rng.choice([-1, 0, 0, 1], size=250), 1, 5)
    w = weights(rng, 250)
    pairs = [Pair(j, p, (j - 1) / 4, (p - 1) / 4, weight=x)
             for j, p, x in zip(judge, people, w, strict=True)]
    found = pair_statistics(pairs, kind="ordinal", categories=(1, 2, 3, 4, 5),
                            n_resamples=RESAMPLES)
    assert found["weighted_kappa"].value == pytest.approx(cohen_kappa_score(
        judge, people, weights="quadratic", labels=[1, 2, 3, 4, 5], sample_weight=w))
    assert found["mae"].value == pytest.approx(
        mean_absolute_error(people, judge, sample_weight=w) / 4)
    assert found["bias"].value == pytest.approx(np.average(judge - people, weights=w) / 4)


def test_continuous_agreement_matches_numpy_and_unweighted_is_plain() -> None:
    rng = np.random.default_rng(5)
    people = rng.random(200)
    judge = np.clip(people + 0.1 + rng.normal(0, 0.05, 200), 0, 1)
    pairs = [Pair(j, p, j, p) for j, p in zip(judge, people, strict=True)]
    found = pair_statistics(pairs, kind="continuous", n_resamples=RESAMPLES)
    assert set(found) == {"mae", "bias"}
    assert found["mae"].value == pytest.approx(mean_absolute_error(people, judge))
    assert found["bias"].value == pytest.approx(float(np.mean(judge - people)))
    assert 0.05 < found["bias"].low < found["bias"].high < 0.15  # type: ignore[operator]


def item(n: int, *, reason: str = "random", probability: float | None = 0.5,
         correct: bool = True, model: str = "judge-1") -> ReviewItem:
    return ReviewItem(
        id=n, sample_id=f"s{n}", metric="bbh_match", verdict_key="k", prompt_version="v",
        judge_model=model, reason=reason, detail=None, probability=probability, stratum=None,
        labels_wanted=1, labels_given=1, skips=0, created_at=NOW, expires_at=NOW,
        done_at=NOW, lease_owner=None, lease_expires_at=None,
        judge_scores={"correct": float(correct), "reasoning": 0.5},
        judge_raw_scores={"correct": correct, "reasoning": 3}, judge_reason=None,
        attributes={}, sample=None)


def label(n: int, value: object, *, reviewer: str = "ann",
          score: str = "correct") -> ReviewLabel:
    return ReviewLabel(item_id=n, sample_id=f"s{n}", metric="bbh_match", reviewer=reviewer,
                       score=score, raw_value=value, value=None, comment=None, source="page",
                       created_at=NOW)


def test_only_random_items_count_weighted_by_their_probability() -> None:
    items = [item(1, correct=True), item(2, correct=False, probability=0.1),
             item(3, correct=True), item(4, reason="filter", probability=None, correct=False),
             item(5, correct=True)]
    labels = [label(1, True), label(2, True), label(3, True), label(4, True),
              label(5, True), label(5, False, reviewer="bob"), label(5, True, reviewer="cy"),
              label(1, 4, score="reasoning"), label(1, 2, reviewer="bob", score="reasoning"),
              label(3, None, score="reasoning")]
    found = {(a.judge_model, a.score): a for a in live_agreement(
        items, labels, registry=load_registry(), n_resamples=RESAMPLES)}
    correct = found["judge-1", "correct"]
    # Items 1, 3, 5 agree (weight 2 each); item 2 disagrees (weight 10); item 4 is chosen.
    assert correct.items == 4 and correct.kind == "binary"
    assert correct.statistics["accuracy"].value == pytest.approx(6 / 16)
    reasoning = found["judge-1", "reasoning"]
    # Item 1's two labels (4 and 2) make one, the lower median: 2; the judge said 3.
    assert reasoning.items == 1 and reasoning.statistics["bias"].value is None
    between = found[REVIEWERS, "correct"]
    assert between.items == 1  # item 5: ann and bob, the first two by name
    assert found[REVIEWERS, "reasoning"].items == 1
