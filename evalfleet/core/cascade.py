"""The rules a judge cascade shares between the worker and the statistics. Pure.

When two values of one score agree (equal for binary and ordinal scores, within a
tolerance for continuous ones), each score's kind, when a verdict's confidence settles
it at a tier, and the cascade's identity in the verdict key. The worker applies them
with no numpy; the threshold fit (:mod:`evalfleet.calibration.cascade`) uses the same
ones, so what is fitted is what runs.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence

from evalfleet.core.metric import Metric
from evalfleet.core.review_slice import salted_fraction

#: Slack on comparisons of normalised scores (0..1), for float rounding.
_EPSILON = 1e-9

#: Continuous scores (0..1) this close agree, with people and between a judge's samples.
AGREEMENT_TOLERANCE = 0.1


def scores_agree(first: float | None, second: float | None, *, kind: str,
                 tolerance: float) -> bool:
    """Whether two normalised (0..1) values of one score agree.

    Args:
        first: One value (None: the score is null).
        second: The other.
        kind: ``binary``, ``ordinal`` (equal) or ``continuous`` (within ``tolerance``).
        tolerance: The largest difference that agrees, for continuous scores.

    Returns:
        True when both are null or they agree under the kind's rule.
    """
    if first is None or second is None:
        return first is None and second is None
    if kind == "continuous":
        return abs(first - second) <= tolerance + _EPSILON
    return math.isclose(first, second, abs_tol=_EPSILON)


def settles(confidence: float | None, threshold: float | None) -> bool:
    """Whether a verdict of this confidence is accepted at a tier with this threshold.

    Args:
        confidence: The verdict's confidence; None when unknown.
        threshold: The tier's threshold; None when it settles nothing (too few labels,
            or no threshold met the guarantee).

    Returns:
        True only when both are known and the confidence reaches the threshold.
    """
    return confidence is not None and threshold is not None and confidence >= threshold


#: A check tier's threshold: it is sure (confidence 1) of what it is decisive on, and its
#: decisive results settle, fit or not (its agreement with people is shown, not fitted).
CHECK_THRESHOLD = 1.0


def check_tiers(metric: Metric) -> dict[int, float]:
    """A metric's check tiers (by index in its cascade) with their fixed threshold."""
    return {index: CHECK_THRESHOLD for index, tier in enumerate(metric.spec.judge.cascade)
            if tier.check is not None}


#: The purpose the cross-fitting folds' hash is salted with.
FOLD_SALT = "cascade-fold"


def fold_of(*, metric: str, sample_id: str, folds: int) -> int:
    """The cross-fitting fold of a sample (0 to ``folds`` - 1), by a hash of its id salted
    for this purpose: the worker judges it with the thresholds fitted without this fold's
    labels, and the fit leaves its label out of them (docs/estimates.md).

    Raises:
        ValueError: When ``folds`` is below 1.
    """
    if folds < 1:
        raise ValueError(f"folds must be at least 1, not {folds}")
    place = salted_fraction(FOLD_SALT, metric=metric, sample_id=sample_id)
    return min(int(place * folds), folds - 1)


#: Prefix of a cascade's identity where a judge model stands in the verdict key.
CASCADE_PREFIX = "cascade:"

#: Hex digits of the digest kept in a cascade's identity.
_IDENTITY_DIGITS = 16


def cascade_identity(tiers: Sequence[tuple[str, str]]) -> str:
    """What stands for the judge model in the verdict key of a cascade's verdicts.

    Its tiers and their prompts make it, cheapest first; its thresholds do not, so a
    refit (new labels) never re-judges the past, while another tier or prompt does.

    Args:
        tiers: Each tier's judge model and prompt version, cheapest first.

    Returns:
        ``cascade:`` and 16 hex digits of a digest over the tiers.

    Raises:
        ValueError: When there are no tiers.
    """
    if not tiers:
        raise ValueError("a cascade needs at least one tier")
    text = json.dumps([list(tier) for tier in tiers], ensure_ascii=True)
    digest = hashlib.sha256(text.encode("ascii")).hexdigest()
    return CASCADE_PREFIX + digest[:_IDENTITY_DIGITS]


def metric_cascade_identity(metric: Metric) -> str:
    """The identity of a metric's ``judge.cascade``: its tiers (a judge's model, a check
    tier's ``check:<name>``; never an endpoint), each with the metric's prompt version.

    Args:
        metric: A metric with a cascade.

    Returns:
        See :func:`cascade_identity`.

    Raises:
        ValueError: When the metric has no cascade.
    """
    return cascade_identity([(tier.label, metric.version) for tier in metric.spec.judge.cascade])
