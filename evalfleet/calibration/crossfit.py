"""Cross-fitted cascade thresholds: no label corrects a score it helped to produce.

A cascade's stored score for a sample depends on the thresholds that judged it, and those
were fitted on people's labels. The corrected estimates (:mod:`evalfleet.core.estimator`)
correct the judge's mean with labels of the same traffic, assuming each labelled item's
judge score is what the judge would have given it without knowing its label. Two cases:

- **Stored verdicts, thresholds fitted on earlier labels** (``fit`` without folds): a
  verdict is judged under the thresholds in use, fitted on labels that existed then, and
  its own label comes later; its score never depends on its own label. But each refit
  changes the cascade's error (the share each tier settles, and so its bias): a refit is
  a judge change, and the label pool of an estimate must not reach back past it.
- **Cross-fitted thresholds** (``fit --folds K``): the labelled items are split into K
  folds by a hash of the sample id (:func:`evalfleet.core.cascade.fold_of`, salted for
  this purpose); the thresholds for fold k are fitted on the other folds only, and the
  worker judges a sample of fold k with them. Then every labelled item can be re-scored
  with the thresholds now in use (every random item carries every tier's verdict, the
  shadow calls), the score its fold's thresholds give, which never saw its label: the
  labels of items judged before a refit measure the new cascade's error too, and the
  estimates keep all their labels across refits.

Each fold's thresholds carry the guarantee for the traffic of their fold; for all the
traffic at once the tiers' deltas add up over the folds too (a union bound), so each fold
is fitted at delta / K and the stated guarantee, 1 - (sum of the tiers' deltas), stays.

Loads numpy and scipy (through the fit): for the CLI and the estimates, never a worker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from evalfleet.calibration.cascade import (
    CascadeFit,
    Guarantee,
    LabelledItem,
    fit_cascade,
)
from evalfleet.core.cascade import fold_of
from evalfleet.core.estimator import LabelledItem as EstimatorItem
from evalfleet.core.rescore import fold_scores


@dataclass(frozen=True, slots=True)
class CrossFit:
    """One fit per fold, each on the labelled items of the other folds."""

    folds: tuple[CascadeFit, ...]
    """Fold k's fit: the thresholds the worker uses for samples of fold k."""

    @property
    def thresholds(self) -> tuple[tuple[float | None, ...], ...]:
        """Each fold's thresholds, cheapest tier first."""
        return tuple(fit.thresholds for fit in self.folds)


def crossfit_cascade(items: Sequence[LabelledItem], *, metric: str, folds: int,
                     kinds: Mapping[str, str], guarantee: Guarantee,
                     fixed: Mapping[int, float] | None = None) -> CrossFit:
    """Fit each fold's thresholds on the other folds' items, at delta / ``folds``.

    Args:
        items: Labelled random items, each with its ``sample_id``.
        metric: The metric (the fold hash is per metric).
        folds: K, at least 2.
        kinds: Each score's kind.
        guarantee: What the thresholds must guarantee, for all folds together.
        fixed: Thresholds given, not fitted (check tiers).

    Returns:
        The fits, fold 0 first.

    Raises:
        ValueError: When ``folds`` is below 2.
    """
    if folds < 2:
        raise ValueError(f"cross-fitting needs at least 2 folds, not {folds}")
    per_fold = replace(guarantee, delta=guarantee.delta / folds)
    fold = [fold_of(metric=metric, sample_id=item.sample_id, folds=folds) for item in items]
    return CrossFit(tuple(
        fit_cascade([item for item, at in zip(items, fold, strict=True) if at != k],
                    kinds=kinds, guarantee=per_fold, fixed=fixed)
        for k in range(folds)))


def rescored_labels(items: Sequence[LabelledItem], *, metric: str, score: str,
                    fit: CrossFit, probabilities: Mapping[str, float]) -> list[EstimatorItem]:
    """The estimator's labelled items for one score, each judged by its fold's thresholds
    (fitted without its label): the pairs that correct a window judged by ``fit``. For
    simulated items (the bench and the statistical tests); the store's pools go through
    :func:`rescored_pool`, on the same :func:`fold_scores`.

    Args:
        items: Labelled random items with every tier's verdict.
        metric: The metric.
        score: The score estimated.
        fit: The cross-fit in use.
        probabilities: Each item's inclusion probability, by sample id.

    Returns:
        One item per labelled item with that score and a kept verdict.
    """
    rescored = []
    for item in items:
        label = item.labels.get(score)
        kept = fold_scores(item.tiers, metric=metric, sample_id=item.sample_id,
                           folds=fit.thresholds)
        judge = None if kept is None else kept.get(score)
        if label is None or judge is None:
            continue
        rescored.append(EstimatorItem(judge=judge, label=label,
                                      probability=probabilities[item.sample_id],
                                      item=item.sample_id))
    return rescored
