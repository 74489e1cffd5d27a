"""How each score of a metric is read and compared: its kind and its range. Pure.

One home for a concept every side needs: alert rules pick their statistics by the kind,
calibration and review compare labels on the scale, the judge cascade decides agreement
by it. All of it follows from the verdict field a score is read from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from evalfleet.core.errors import InvalidSample
from evalfleet.core.metric import Metric, ScoreKind


@dataclass(frozen=True, slots=True)
class ScoreScale:
    """How one of a metric's scores is compared."""

    kind: ScoreKind
    categories: tuple[float, ...] = ()
    """Ordinal scores: every rubric value, in order."""
    low: float = 0.0
    high: float = 1.0


def score_scales(metric: Metric) -> dict[str, ScoreScale]:
    """The kind and range of each of ``metric``'s scores, from its output spec.

    Args:
        metric: A metric.

    Returns:
        By score name: ``binary`` for a boolean, ``ordinal`` (with its rubric values)
        for an integer, ``continuous`` for a number.
    """
    scales: dict[str, ScoreScale] = {}
    for name, score in metric.spec.scores.items():
        spec = metric.spec.output.fields[score.source]
        if spec.type == "boolean":
            scales[name] = ScoreScale("binary", low=0.0, high=1.0)
        elif spec.type == "integer":
            assert spec.minimum is not None and spec.maximum is not None
            values = tuple(float(v) for v in range(int(spec.minimum), int(spec.maximum) + 1))
            scales[name] = ScoreScale("ordinal", values, low=spec.minimum, high=spec.maximum)
        else:
            scales[name] = ScoreScale("continuous", low=spec.minimum or 0.0,
                                      high=spec.maximum if spec.maximum is not None else 1.0)
    return scales


def score_kinds(metric: Metric) -> dict[str, ScoreKind]:
    """Each score's kind: ``binary`` (boolean), ``ordinal`` (integer) or ``continuous``."""
    return {name: scale.kind for name, scale in score_scales(metric).items()}


def score_kind(metric: Metric, score: str) -> ScoreKind:
    """How one stored score is read.

    Raises:
        KeyError: When the metric has no such score.
    """
    return score_kinds(metric)[score]


def label_value(value: Any, *, scale: ScoreScale | None, record: str,
                sample_id: str | None, field: str) -> float:
    """A person's value for one score, checked against the score's scale.

    Args:
        value: As given: true/false for a binary score, a rubric value for an ordinal one,
            a number in range for a continuous one.
        scale: The score's scale; None when the metric has no such score.
        record, sample_id, field: Where the value came from, for the error.

    Returns:
        The value on the judge's scale (booleans as 0 and 1).

    Raises:
        InvalidSample: Naming the record, the sample and the field.
    """
    def invalid(reason: str) -> InvalidSample:
        return InvalidSample(reason, record=record, sample_id=sample_id, field=field)

    if scale is None:
        raise invalid("not a score of this metric")
    if scale.kind == "binary":
        if not isinstance(value, bool):
            raise invalid("expected true or false")
        return float(value)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise invalid("expected a number")
    if not scale.low <= value <= scale.high:
        raise invalid(f"{value} is outside {scale.low:g}..{scale.high:g}")
    if scale.kind == "ordinal" and float(value) not in scale.categories:
        raise invalid(f"{value} is not one of the rubric's values")
    return float(value)


def label_agreement(judge: float, label: float, *, scale: ScoreScale) -> tuple[float, float]:
    """How far one judged value agrees with its label.

    Args:
        judge: The judge's value, on its own scale.
        label: People's value, on the same scale.
        scale: The score's kind and range.

    Returns:
        ``(agreement, bias)``: agreement in 0..1 (binary: 1 when equal else 0; others
        1 - |judge - label| / range), and the signed bias (judge - label) / range in -1..1.
    """
    if scale.kind == "binary":
        return (1.0 if judge == label else 0.0), judge - label
    spread = (scale.high - scale.low) or 1.0
    bias = (judge - label) / spread
    return 1.0 - abs(bias), bias
