"""The canary series: how a judge's verdicts on gold samples agree with their labels. Pure.

Workers add these series to a canary verdict; ``judge_drift`` alert rules test them
against the last calibration. Both need the same names and the same arithmetic.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from evalfleet.core.scales import ScoreScale, label_agreement

#: Prefix of the agreement series of a canary score: ``canary:faithfulness``.
CANARY_AGREEMENT_PREFIX = "canary:"

#: Prefix of the bias series of a canary score: ``canary_bias:faithfulness``.
CANARY_BIAS_PREFIX = "canary_bias:"


def canary_series_names(score: str) -> tuple[str, str]:
    """The stored series names of a score's canary agreement and bias.

    Args:
        score: One of a metric's score names.

    Returns:
        ``(agreement series, bias series)``; the prefixes keep them apart from the
        production series of the same score.
    """
    return CANARY_AGREEMENT_PREFIX + score, CANARY_BIAS_PREFIX + score


def canary_series(raw_scores: Mapping[str, Any], labels: Mapping[str, float], *,
                  scales: Mapping[str, ScoreScale]) -> dict[str, float]:
    """The canary series values of one verdict against its gold labels.

    A score the judge left null, one whose value is not a finite number, or one with no
    label or scale adds nothing: a verdict that failed to parse adds no series at all
    (its caller passes no scores).

    Args:
        raw_scores: The verdict's values on the judge's scale (booleans as they came).
        labels: The gold labels by score name.
        scales: The metric's score scales (:func:`score_scales`).

    Returns:
        By series name (:func:`canary_series_names`): agreement and bias values.
    """
    series: dict[str, float] = {}
    for name, label in labels.items():
        scale, raw = scales.get(name), raw_scores.get(name)
        if scale is None or raw is None or isinstance(raw, str):
            continue
        try:
            value = float(raw)
        except (TypeError, ValueError):
            continue
        if not math.isfinite(value) or not math.isfinite(label):
            continue
        agreement_name, bias_name = canary_series_names(name)
        series[agreement_name], series[bias_name] = label_agreement(value, label, scale=scale)
    return series
