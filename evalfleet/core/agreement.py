"""How well a judge agrees with people (or with another judge) on one score. Pure.

Which statistics fit depends on the score's kind:

- ``binary`` (``is_correct``): Cohen's kappa, accuracy and the confusion matrix;
- ``ordinal`` (a 1-5 rubric): quadratically weighted kappa and Spearman's rho;
- ``continuous`` (a 0..1 float): Spearman's rho, mean absolute error and mean bias
  (judge minus reference: a judge that scores high shows a positive bias).

Every statistic comes with a bootstrap 95% interval over the paired items
(``scipy.stats.bootstrap``, BCa, else percentile), because a kappa of 0.7 on 30 items and on 3,000
items are different claims. Pairs where either side is null are left out and
counted.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from evalfleet.core.metric import ScoreKind

#: Bootstrap resamples per interval: enough for stable 2.5% and 97.5% quantiles.
N_RESAMPLES = 2000

#: Coverage of every interval.
CONFIDENCE = 0.95

@dataclass(frozen=True)
class Estimate:
    """One statistic with its bootstrap interval."""

    value: float | None
    """The statistic on all pairs; None when it is undefined (one class only, no spread)."""

    low: float | None = None
    """Lower end of the 95% interval; None when it cannot be computed."""

    high: float | None = None
    """Upper end of the 95% interval."""


@dataclass(frozen=True)
class Agreement:
    """Agreement of a judge with a reference on one score."""

    kind: ScoreKind
    pairs: int
    """Items where both sides gave a value."""

    skipped: int
    """Items left out because one side was null."""

    statistics: dict[str, Estimate] = field(default_factory=dict)
    """By name: ``kappa``, ``accuracy`` (binary); ``weighted_kappa``, ``spearman``
    (ordinal); ``spearman``, ``mae``, ``bias`` (continuous)."""

    confusion: list[list[int]] | None = None
    """Binary only: rows are the reference (false, true), columns the judge."""


def cohen_kappa(judge: np.ndarray, reference: np.ndarray, *, categories: Sequence[float],
                quadratic: bool = False, sample_weight: np.ndarray | None = None) -> float:
    """Cohen's kappa of two raters over ``categories``, optionally quadratically weighted.

    Args:
        judge: One rater's values, each one of ``categories``.
        reference: The other rater's values, paired with ``judge``.
        categories: Every possible value, in order (the order matters when weighted).
        quadratic: Weight disagreements by the squared distance between categories.
        sample_weight: Each item's weight (an inverse inclusion probability); None
            counts every item once.

    Returns:
        Kappa in [-1, 1]; NaN when chance agreement is total (both raters used one
        category only).
    """
    index = {value: position for position, value in enumerate(categories)}
    size = len(categories)
    observed = np.zeros((size, size))
    np.add.at(observed, ([index[v] for v in reference], [index[v] for v in judge]),
              1.0 if sample_weight is None else sample_weight)
    expected = np.outer(observed.sum(axis=1), observed.sum(axis=0)) / observed.sum()
    rows, columns = np.indices((size, size))
    weights = (rows - columns) ** 2 if quadratic else (rows != columns).astype(float)
    chance = float((weights * expected).sum())
    if chance == 0.0:
        return math.nan
    return 1.0 - float((weights * observed).sum()) / chance


def agreement(judge: Sequence[float | None], reference: Sequence[float | None], *,
              kind: ScoreKind, categories: Sequence[float] = (), seed: int = 0,
              n_resamples: int = N_RESAMPLES) -> Agreement:
    """The agreement statistics of ``judge`` against ``reference`` for a score of ``kind``.

    Args:
        judge: The judge's values (booleans as 0/1), None where it gave none.
        reference: The reference values for the same items, in the same order.
        kind: The score's kind.
        categories: Ordinal only: every rubric value in order (e.g. 1..5).
        seed: Seed of the bootstrap, so a report is reproducible.
        n_resamples: Bootstrap resamples per interval.

    Returns:
        The statistics with their intervals.

    Raises:
        ValueError: When the sequences differ in length, or ordinal without categories.
    """
    if len(judge) != len(reference):
        raise ValueError(f"{len(judge)} judge values against {len(reference)} references")
    kept = [(j, r) for j, r in zip(judge, reference, strict=True)
            if j is not None and r is not None]
    skipped = len(judge) - len(kept)
    j = np.array([float(pair[0]) for pair in kept])
    r = np.array([float(pair[1]) for pair in kept])
    chosen = _statistics(kind, categories=categories)
    rng = np.random.default_rng(seed)
    estimates = {name: bootstrap_estimate(statistic, j, r, rng=rng, n_resamples=n_resamples)
                 for name, statistic in chosen.items()}
    confusion = None
    if kind == "binary":
        confusion = [[int(np.sum((r == truth) & (j == said))) for said in (0.0, 1.0)]
                     for truth in (0.0, 1.0)]
    return Agreement(kind=kind, pairs=len(kept), skipped=skipped, statistics=estimates,
                     confusion=confusion)


@dataclass(frozen=True)
class Statistic:
    """A statistic over paired samples, as the bootstrap calls it."""

    compute: Callable[..., Any]
    vectorized: bool
    """True when ``compute`` takes an ``axis`` (a whole batch of resamples at once)."""


def _statistics(kind: ScoreKind, *, categories: Sequence[float]) -> dict[str, Statistic]:
    if kind == "binary":
        return {
            "kappa": Statistic(lambda j, r: cohen_kappa(j, r, categories=(0.0, 1.0)), False),
            "accuracy": Statistic(lambda j, r, axis=-1: np.mean(j == r, axis=axis), True),
        }
    if kind == "ordinal":
        if not categories:
            raise ValueError("an ordinal score needs its categories")
        levels = [float(value) for value in categories]
        return {
            "weighted_kappa": Statistic(
                lambda j, r: cohen_kappa(j, r, categories=levels, quadratic=True), False),
            "spearman": Statistic(_spearman, True),
        }
    return {
        "spearman": Statistic(_spearman, True),
        "mae": Statistic(lambda j, r, axis=-1: np.mean(np.abs(j - r), axis=axis), True),
        "bias": Statistic(lambda j, r, axis=-1: np.mean(j - r, axis=axis), True),
    }


def _spearman(judge: np.ndarray, reference: np.ndarray, axis: int = -1) -> np.ndarray:
    """Spearman's rho along ``axis``: Pearson's r of the ranks; NaN where a side is constant."""
    ranks = [stats.rankdata(side, axis=axis) for side in (judge, reference)]
    centred = [rank - rank.mean(axis=axis, keepdims=True) for rank in ranks]
    spread = np.sqrt((centred[0] ** 2).sum(axis=axis) * (centred[1] ** 2).sum(axis=axis))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray((centred[0] * centred[1]).sum(axis=axis) / spread)


def bootstrap_estimate(statistic: Statistic, *samples: np.ndarray, rng: np.random.Generator,
                       n_resamples: int = N_RESAMPLES,
                       methods: Sequence[str] = ("BCa", "percentile")) -> Estimate:
    """A statistic of paired samples (resampled together) with its bootstrap 95% interval.

    Args:
        statistic: What to compute from the samples.
        samples: Equal-length arrays, one value per item each.
        rng: The bootstrap's generator.
        n_resamples: Bootstrap resamples.
        methods: Interval methods tried in order (BCa's jackknife costs a statistic per
            item: percentile alone suits thousands of items).

    Returns:
        The value on all items and its interval (the first method that gives one); None
        where the statistic is undefined or there are fewer than two items.
    """
    if len(samples[0]) < 2:
        return Estimate(None)
    value = float(statistic.compute(*samples))
    if not math.isfinite(value):
        return Estimate(None)
    # BCa corrects for skew, but needs spread in its jackknife; the percentile
    # interval is the fallback. A resample with one class only has no kappa: an
    # interval that cannot be computed is left open.
    for method in methods:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = stats.bootstrap(samples, statistic.compute, paired=True,
                                     vectorized=statistic.vectorized, n_resamples=n_resamples,
                                     confidence_level=CONFIDENCE, method=method, rng=rng)
        low, high = result.confidence_interval
        if math.isfinite(low) and math.isfinite(high):
            return Estimate(value, float(low), float(high))
    return Estimate(value)
