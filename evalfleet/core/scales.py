"""How each score of a metric is read and compared: its kind and its range. Pure.

One home for a concept every side needs: alert rules pick their statistics by the kind,
calibration and review compare labels on the scale, the judge cascade decides agreement
by it. All of it follows from the verdict field a score is read from.
"""

from __future__ import annotations

from dataclasses import dataclass

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
