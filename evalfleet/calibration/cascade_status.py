"""What a judge cascade guarantees and costs, from labelled items: read, fit, summarised.

The input is one JSON object per line, a random review item judged by every tier
(scores and labels normalised to 0..1, as the export's ``scores``)::

    {"labels": {"correct": 1.0, "reasoning": 0.75},
     "tiers": [{"model": "nano", "scores": {"correct": 1.0, "reasoning": 0.75},
                "confidence": 0.93, "cost_usd": 0.00012},
               {"model": "large", "scores": {...}, "confidence": 0.99, "cost_usd": 0.0029}]}

A tier that failed on an item is ``null`` in ``tiers``. A bad line is reported with its
number and field and left out; the rest goes on. Loads numpy and scipy (through the fit).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from evalfleet.calibration.cascade import (
    CascadeFit,
    Guarantee,
    LabelledItem,
    TierJudgement,
    fit_cascade,
)
from evalfleet.core.cascade import settles

#: Most tiers a cascade may have.
MAX_TIERS = 8


@dataclass(frozen=True, slots=True)
class CostedItem:
    """A labelled item and what each tier's call on it cost (None: unknown)."""

    item: LabelledItem
    costs: tuple[float | None, ...]
    models: tuple[str | None, ...]


@dataclass(frozen=True, slots=True)
class TierStatus:
    """One tier's line of the status."""

    tier: int
    model: str | None
    threshold: float | None
    labels: int
    accepted: int
    guaranteed_agreement: float | None
    settled_share: float
    """Share of all items this tier settles."""


@dataclass(frozen=True, slots=True)
class CascadeStatus:
    """The whole status: tiers, the guarantee, and the cost against the last tier alone."""

    fit: CascadeFit
    tiers: tuple[TierStatus, ...]
    usd_per_1000: float | None
    """Judge cost per 1,000 verdicts of the cascade (every tier tried); None when unknown."""
    last_tier_usd_per_1000: float | None
    """The same for the last tier alone."""


def read_items(lines: Iterable[str]) -> tuple[list[CostedItem], list[str]]:
    """Labelled items from JSON lines.

    Args:
        lines: The file's lines.

    Returns:
        The items read, and one problem per bad line (``line 3: tiers[1].confidence:
        not a number in 0..1``).
    """
    items, problems = [], []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            items.append(_item(json.loads(line)))
        except (ValueError, RecursionError) as exc:
            problems.append(f"line {number}: {exc}")
    return items, problems


def _item(data: Any) -> CostedItem:
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    labels = _scores(data.get("labels"), "labels")
    tiers = data.get("tiers")
    if not isinstance(tiers, list) or not 0 < len(tiers) <= MAX_TIERS:
        raise ValueError(f"tiers: a list of 1 to {MAX_TIERS} tiers is required")
    judgements: list[TierJudgement | None] = []
    costs: list[float | None] = []
    models: list[str | None] = []
    for index, tier in enumerate(tiers):
        where = f"tiers[{index}]"
        if tier is None:
            judgements.append(None)
            costs.append(None)
            models.append(None)
            continue
        if not isinstance(tier, dict):
            raise ValueError(f"{where}: not an object or null")
        confidence = _unit(tier.get("confidence"), f"{where}.confidence", nullable=True)
        judgements.append(TierJudgement(_scores(tier.get("scores"), f"{where}.scores"),
                                        confidence))
        costs.append(_cost(tier.get("cost_usd"), f"{where}.cost_usd"))
        model = tier.get("model")
        models.append(model[:128] if isinstance(model, str) else None)
    return CostedItem(LabelledItem(labels, tuple(judgements)), tuple(costs), tuple(models))


def _scores(value: Any, where: str) -> dict[str, float | None]:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: an object of scores is required")
    return {str(name): _unit(score, f"{where}.{name}", nullable=True)
            for name, score in value.items()}


def _unit(value: Any, where: str, *, nullable: bool) -> float | None:
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            math.isfinite(value) and 0.0 <= value <= 1.0):
        raise ValueError(f"{where}: not a number in 0..1")
    return float(value)


def _cost(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            math.isfinite(value) and value >= 0):
        raise ValueError(f"{where}: not a cost in US dollars")
    return float(value)


def cascade_status(items: list[CostedItem], *, kinds: Mapping[str, str],
                   guarantee: Guarantee, fixed: Mapping[int, float] | None = None,
                   ) -> CascadeStatus:
    """Fit the thresholds and summarise each tier, and the cost per 1,000 verdicts.

    Args:
        items: Labelled items with each tier's verdict and cost.
        kinds: Each score's kind.
        guarantee: What the thresholds must guarantee.
        fixed: Thresholds given, not fitted, by tier index (check tiers).

    Returns:
        The status. The cascade's cost counts every tier an item reaches (the first
        always, the next when the earlier ones do not settle it); it is None when a
        cost on that path is unknown.
    """
    fit = fit_cascade([costed.item for costed in items], kinds=kinds, guarantee=guarantee,
                      fixed=fixed)
    n_items = max(fit.items, 1)
    tiers = tuple(
        TierStatus(index + 1, _model(items, index), tier.threshold, tier.labels, tier.accepted,
                   tier.guaranteed_agreement, tier.accepted / n_items)
        for index, tier in enumerate(fit.tiers))
    return CascadeStatus(fit, tiers, _per_1000(_cascade_costs(items, fit.thresholds)),
                         _per_1000([costed.costs[-1] for costed in items]))


def _model(items: list[CostedItem], index: int) -> str | None:
    return next((costed.models[index] for costed in items
                 if index < len(costed.models) and costed.models[index]), None)


def _cascade_costs(items: list[CostedItem],
                   thresholds: tuple[float | None, ...]) -> list[float | None]:
    costs: list[float | None] = []
    for costed in items:
        total: float | None = 0.0
        for index, judgement in enumerate(costed.item.tiers):
            cost = costed.costs[index]
            total = None if total is None or cost is None else total + cost
            threshold = thresholds[index] if index < len(thresholds) else None
            if settles(judgement.confidence if judgement else None, threshold):
                break
        costs.append(total)
    return costs


def _per_1000(costs: list[float | None]) -> float | None:
    if not costs or any(cost is None for cost in costs):
        return None
    return 1000.0 * sum(cost for cost in costs if cost is not None) / len(costs)
