"""The label pool of a cascade metric: the thresholds in use, where a pool may start after
a refit, and its items re-scored per fold when the thresholds are cross-fitted. What the
corrected estimates (review) and the alerts' label checks both read.
"""

from __future__ import annotations

from datetime import datetime

from evalfleet.core.cascade import metric_cascade_identity
from evalfleet.core.durations import format_moment
from evalfleet.core.labelpool import PoolItem
from evalfleet.core.metric import Metric
from evalfleet.core.rescore import rescored_pool
from evalfleet.store.queries.cascade import StoredThresholds
from evalfleet.store.queries.estimate import EstimateReads


def cascade_fit(reads: EstimateReads, *, metric: Metric) -> StoredThresholds | None:
    """The thresholds a cascade metric is judged with now; None for a metric without a
    cascade, or before its first fit."""
    if not metric.spec.judge.cascade:
        return None
    return reads.cascade_fit(metric=metric.name, identity=metric_cascade_identity(metric))


def since_refit(fit: StoredThresholds | None, *, label_start: datetime) -> datetime:
    """Where a label pool may start under ``fit``: a refit that is not cross-fitted is a
    judge change, so no earlier than it (:func:`cascade_refit`); else ``label_start``.
    Pass the result through :func:`label_pool` (a window's own labels always count)."""
    if fit is not None and not fit.folds:
        return max(label_start, fit.created_at)
    return label_start


def cascade_pool_items(reads: EstimateReads, *, metric: Metric, fit: StoredThresholds | None,
                       start: datetime, end: datetime) -> tuple[list[PoolItem], int]:
    """A label pool's review items, each random one re-scored with its fold's
    thresholds when ``fit`` is cross-fitted
    (:func:`evalfleet.core.rescore.rescored_pool`); as stored otherwise. What
    every corrected number of a cascade metric reads its labels from (the estimates and
    the alerts' judge check).

    Returns:
        The items, and how many labelled random items could not be re-scored (left out).
    """
    crossed = fit is not None and bool(fit.folds)
    items = reads.pool_items(metric=metric.name, start=start, end=end, with_cascade=crossed)
    if fit is None or not crossed:
        return items, 0
    rescored = rescored_pool(items, metric=metric, folds=fit.folds)
    return rescored.items, rescored.not_rescored


def cascade_refit(fit: StoredThresholds, *, start: datetime, not_rescored: int = 0) -> str:
    """How a cascade's labels correct a window judged with ``fit``, as every place that
    shows a corrected number says it. Pure.

    A refit changes the cascade's error (what each tier settles), so labels of verdicts
    judged before it measure another judge. Cross-fitted thresholds let every labelled
    item be re-scored with the thresholds in use (its fold's, which never saw its
    label), so the pool keeps its length; otherwise the pool starts at the refit.

    Args:
        fit: The thresholds in use.
        start: The window's start.
        not_rescored: Labelled items left out for lacking a tier's verdict.
    """
    when = format_moment(fit.created_at)
    if fit.folds:
        text = (f"cascade thresholds version {fit.version} ({when}) are cross-fitted over "
                f"{len(fit.folds)} folds: labels re-scored with the thresholds in use, each "
                "item with its fold's (fitted without its label), so labels from before the "
                "refit count")
        if not_rescored:
            text += (f"; {not_rescored} labelled items without every tier's verdict left "
                     "out")
    else:
        text = (f"cascade thresholds version {fit.version} ({when}) are not cross-fitted: "
                "a refit is a judge change, so the label pool starts no earlier than it")
    if fit.created_at > start:
        text += "; the window starts before that refit, so its verdicts mix two cascades"
    return text
