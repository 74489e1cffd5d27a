"""Re-scoring labelled items under a cascade's thresholds in use: every tier's judgement
read back from a verdict's cascade record, and the scores the cascade keeps for an item
under the thresholds of its fold. Pure; shared by the corrected estimates (review), the
alerts' label checks and the cross-fitting simulations (calibration).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from evalfleet.core.cascade import fold_of, settles
from evalfleet.core.labelpool import PoolItem
from evalfleet.core.metric import Metric
from evalfleet.core.review_slice import RANDOM_REASON


@dataclass(frozen=True, slots=True)
class TierJudgement:
    """One tier's verdict on a labelled item."""

    scores: Mapping[str, float | None]
    """Normalised (0..1) scores by name; None where the score is null."""
    confidence: float | None
    """The verdict's confidence (lowest of its scores'); None when unknown."""


def tier_judgements(record: dict[str, Any] | None, *,
                    n_tiers: int) -> tuple[TierJudgement | None, ...] | None:
    """Every tier's judgement in a verdict's cascade record, cheapest first (None for a
    tier that gave no verdict); None when the record lacks a tier (not judged by every
    tier, or the verdict is gone)."""
    tried = tier_entries(record, n_tiers=n_tiers)
    return None if tried is None else tuple(tier_judgement(tier) for tier in tried)


def tier_entries(record: dict[str, Any] | None, *, n_tiers: int) -> list[dict[str, Any]] | None:
    """Every tier's entry, cheapest first, or None when a tier is missing."""
    if not isinstance(record, dict) or not isinstance(record.get("tried"), list):
        return None
    by_tier = {entry.get("tier"): entry for entry in record["tried"] if isinstance(entry, dict)}
    tiers = [by_tier.get(number) for number in range(1, n_tiers + 1)]
    return None if any(tier is None for tier in tiers) else tiers  # type: ignore[return-value]


def tier_judgement(tier: dict[str, Any]) -> TierJudgement | None:
    """One tier's entry of a cascade record as a judgement; None when it gave no verdict."""
    scores = tier.get("scores")
    if not isinstance(scores, dict):
        return None  # the tier gave no verdict: it agrees with nothing, settles nothing
    return TierJudgement({str(k): number_or_none(v) for k, v in scores.items()},
                         number_or_none(tier.get("confidence")))


def number_or_none(value: Any) -> float | None:
    """A recorded number, or None for anything else (a bool is not a number here)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else None


def kept_scores(tiers: Sequence[TierJudgement | None],
                thresholds: Sequence[float | None]) -> Mapping[str, float | None] | None:
    """The scores a cascade keeps for an item under ``thresholds``, as the worker would:
    the first tier that settles it, else the last tier's (low-confidence).

    Returns:
        The kept verdict's scores; None when that tier gave no verdict.
    """
    for judgement, threshold in zip(tiers, thresholds, strict=False):
        if judgement is not None and settles(judgement.confidence, threshold):
            return judgement.scores
    last = tiers[-1] if tiers else None
    return None if last is None else last.scores


def fold_scores(tiers: Sequence[TierJudgement | None], *, metric: str, sample_id: str,
                folds: Sequence[Sequence[float | None]]) -> Mapping[str, float | None] | None:
    """The scores a cross-fitted cascade keeps for a sample: :func:`kept_scores` under
    the thresholds of the sample's fold (fitted without its label). The one re-scoring
    the estimates' pools (:func:`rescored_pool`) and the simulations
    (:func:`rescored_labels`) share.

    Args:
        tiers: Every tier's judgement of the sample, cheapest first.
        metric: The metric (the fold hash is per metric).
        sample_id: The sample.
        folds: Each fold's thresholds, fold 0 first.
    """
    return kept_scores(tiers, folds[fold_of(metric=metric, sample_id=sample_id,
                                            folds=len(folds))])


@dataclass(frozen=True, slots=True)
class RescoredPool:
    """A label pool's review items with the judge scores the cascade in use gives them."""

    items: list[PoolItem]
    """Random items re-scored; chosen items as they were (the estimates refuse them)."""
    not_rescored: int
    """Labelled random items whose verdict lacks a tier's verdict (judged before every
    random candidate went to every tier, or the verdict is gone): their judge scores are
    dropped, so the estimates leave them out."""


def rescored_pool(pool: Sequence[PoolItem], *, metric: Metric,
                  folds: Sequence[Sequence[float | None]]) -> RescoredPool:
    """Each random item's judge scores as its fold's thresholds in use would keep them,
    from every tier's verdict in its cascade record (read with ``with_cascade``): the
    corrected estimates of a cross-fitted cascade then measure the cascade in use on
    labels that never fitted the thresholds scoring them, whenever they were given.

    Args:
        pool: The pool's items, each with its verdict's cascade record.
        metric: The metric, with its ``judge.cascade``.
        folds: Each fold's thresholds (``StoredThresholds.folds``), fold 0 first.

    Returns:
        The items re-scored, and how many labelled ones could not be.
    """
    n_tiers = len(metric.spec.judge.cascade)
    items, not_rescored = [], 0
    for item in pool:
        if item.reason != RANDOM_REASON:
            items.append(item)
            continue
        tiers = tier_judgements(item.cascade, n_tiers=n_tiers)
        kept = None if tiers is None else fold_scores(tiers, metric=metric.name,
                                                      sample_id=item.sample_id, folds=folds)
        not_rescored += kept is None and bool(item.labels)
        items.append(replace(item, judge_scores=dict(kept or {})))
    return RescoredPool(items=items, not_rescored=not_rescored)
