"""People's labels on the judge's own scale: normalised and combined. Pure.

A label is given on the scale the metric file declares for the judge (true/false, a
rubric value such as 1 to 5, a number in 0..1) and normalised the way the judge's
value is (``ScoreSpec.scale``), so the two compare directly. Null means "cannot say"
and is kept as such, never counted as a value.

When an item has several reviewers' labels for one score they make one as follows:
binary, the majority (a tie makes none); ordinal, the lower median (a rubric value);
continuous, the mean. "Cannot say" labels are left out first.

Shared by everything that reads labels: the review queue's estimates and agreement,
the alert engine's label checks, calibration and dataset exports.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from evalfleet.core.metric import Metric
from evalfleet.core.scales import ScoreScale, score_scales


def normalise(raw: float, *, metric: Metric, score: str) -> float:
    """A value on the judge's scale of ``score`` as 0..1, as the judge's own scores are.

    Args:
        raw: The value (a boolean as 0 or 1).
        metric: The metric.
        score: One of its scores.

    Returns:
        The value normalised by the score's declared scale (booleans stay 0 or 1).
    """
    return normaliser(metric=metric, score=score)(raw)


def normaliser(*, metric: Metric, score: str) -> Callable[[float], float]:
    """:func:`normalise` for one score, its scale read once (for thousands of labels)."""
    if score_scales(metric)[score].kind == "binary":
        return float
    low, high = metric.spec.scores[score].scale
    span = (high - low) or 1.0
    return lambda raw: (float(raw) - low) / span


def combine_labels(values: Sequence[Any], *, scale: ScoreScale) -> Any:
    """One value from several reviewers' labels of a score (see the module's rule).

    Args:
        values: The labels on the judge's scale; None ("cannot say") is left out.
        scale: The score's scale.

    Returns:
        The combined value on the same scale, or None when there is none (no values, or
        a binary tie).
    """
    given = [value for value in values if value is not None]
    if not given:
        return None
    if scale.kind == "binary":
        yes = sum(1 for value in given if value)
        if 2 * yes == len(given):
            return None
        return 2 * yes > len(given)
    if scale.kind == "ordinal":
        return statistics.median_low(given)
    return statistics.fmean(given)
