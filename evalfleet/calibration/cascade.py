"""Confidence thresholds of a judge cascade, fitted on human labels with a guarantee.

A cascade asks its tiers in order, cheapest first, and accepts a tier's verdict when the
verdict's confidence reaches that tier's threshold ("Trust or Escalate", Jung, Brahman
and Choi, ICLR 2025). Each tier's threshold is fitted here, per metric, from random
review items that every tier judged and people labelled:

- An item **agrees** when every score people labelled agrees with the tier's (equal for
  binary and ordinal scores, within ``tolerance`` on the 0..1 scale for continuous
  ones; null only with null): a verdict with several scores counts as right only if all
  are, and its confidence is the lowest of its scores', so it is accepted only if every
  score passes.
- Tier k is fitted on the items the earlier tiers (with their fitted thresholds) would
  not settle. Candidate thresholds are the confidences seen, highest first, from the
  first that accepts enough items (:func:`start_size`: at least ``min_labels``, and
  enough that a judge disagreeing half as often as allowed would pass); each is tested
  in turn (fixed-sequence testing, no correction needed) against "the accepted verdicts
  agree with people less often than ``target``" with the exact binomial tail (the
  Clopper-Pearson bound), and the lowest threshold whose test and every earlier test
  reject at level ``delta`` is kept. The first one that fails ends the search.
- So, with probability at least 1 - ``delta`` over the labels drawn, the verdicts a tier
  accepts agree with people at least at ``target``; over all tiers at once with
  probability at least 1 - (sum of the tiers' deltas) (a union bound). It covers
  accepted verdicts only: what the last tier stores below its own threshold is marked
  low-confidence, and its share is reported beside the guarantee.
- Too few labels, or a judge whose confident verdicts are wrong too often, give no
  threshold: that tier settles nothing and everything goes on (never a guess). An
  overconfident judge is caught here, by the labels, not by its own figures.

The bound assumes the labelled items were drawn with equal probability from the traffic
that reaches the tier: fit on the review slice's random items of one stratum.

Loads numpy and scipy: for the CLI, the page and the alert engine, never a worker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from evalfleet.core.cascade import AGREEMENT_TOLERANCE, scores_agree, settles
from evalfleet.core.errors import InvalidInput
from evalfleet.core.rescore import TierJudgement

#: Agreement of accepted verdicts asked for when none is configured.
DEFAULT_TARGET = 0.85

#: Chance, per tier, that the guarantee fails for the labels drawn.
DEFAULT_DELTA = 0.05

#: Fewest labelled items behind a tier's threshold; fewer and it settles nothing.
DEFAULT_MIN_LABELS = 30

#: Continuous scores (0..1) this close to people's agree.
DEFAULT_TOLERANCE = AGREEMENT_TOLERANCE


class InvalidGuarantee(InvalidInput):
    """A cascade guarantee asked for with values out of range."""


@dataclass(frozen=True, slots=True)
class Guarantee:
    """What a cascade's thresholds must guarantee."""

    target: float = DEFAULT_TARGET
    """Agreement with people the accepted verdicts must reach, 0..1."""
    delta: float = DEFAULT_DELTA
    """Chance per tier that they do not, for the labels drawn."""
    tolerance: float = DEFAULT_TOLERANCE
    """Continuous scores within this (0..1 scale) agree."""
    min_labels: int = DEFAULT_MIN_LABELS
    """Fewest labelled items a tier's threshold rests on."""

    def __post_init__(self) -> None:
        if not 0.0 < self.target < 1.0:
            raise InvalidGuarantee(f"target must be between 0 and 1, not {self.target!r}")
        if not 0.0 < self.delta < 1.0:
            raise InvalidGuarantee(f"delta must be between 0 and 1, not {self.delta!r}")
        if not 0.0 <= self.tolerance < 1.0:
            raise InvalidGuarantee(f"tolerance must be in [0, 1), not {self.tolerance!r}")
        if self.min_labels < 1:
            raise InvalidGuarantee(f"min_labels must be at least 1, not {self.min_labels!r}")


@dataclass(frozen=True, slots=True)
class LabelledItem:
    """A random review item: people's labels and every tier's verdict on it."""

    labels: Mapping[str, float | None]
    """People's normalised scores by name (scores they left out are not compared)."""
    tiers: tuple[TierJudgement | None, ...]
    """Each tier's verdict, cheapest first; None where that tier gave none (failed)."""
    sample_id: str = ""
    """The sample's id: its cross-fitting fold is a hash of it."""


@dataclass(frozen=True, slots=True)
class TierFit:
    """One tier's fitted threshold and what it rests on."""

    threshold: float | None
    """Lowest confidence accepted; None: the tier settles nothing."""
    labels: int
    """Labelled items that reached this tier (not settled earlier)."""
    accepted: int
    """Of those, the ones this tier would settle."""
    agreeing: int
    """Of the accepted, the ones that agree with people."""
    guaranteed_agreement: float | None
    """Lower bound on the accepted verdicts' agreement at confidence 1 - delta
    (Clopper-Pearson); None when nothing is accepted."""

    @property
    def settled_share(self) -> float:
        """Share of the items reaching this tier that it settles."""
        return self.accepted / self.labels if self.labels else 0.0


@dataclass(frozen=True, slots=True)
class CascadeFit:
    """Every tier's fit, and the guarantee they make together."""

    tiers: tuple[TierFit, ...]
    guarantee: Guarantee
    items: int
    """Labelled items the fit used."""
    fixed: tuple[int, ...] = ()
    """Tiers whose threshold was given, not fitted (check tiers): outside the guarantee."""

    @property
    def confidence_level(self) -> float:
        """Chance that every fitted tier's guarantee holds at once: 1 - (sum of deltas)."""
        return max(0.0, 1.0 - self.guarantee.delta * (len(self.tiers) - len(self.fixed)))

    @property
    def low_confidence_share(self) -> float:
        """Share of the labelled items no tier settles (stored as the last tier's, marked)."""
        settled = sum(tier.accepted for tier in self.tiers)
        return 1.0 - settled / self.items if self.items else 1.0

    @property
    def thresholds(self) -> tuple[float | None, ...]:
        """Each tier's threshold, cheapest first."""
        return tuple(tier.threshold for tier in self.tiers)


def item_agrees(judgement: TierJudgement, labels: Mapping[str, float | None], *,
                kinds: Mapping[str, str], tolerance: float) -> bool | None:
    """Whether a tier's verdict agrees with people on every score they labelled.

    Args:
        judgement: The tier's verdict.
        labels: People's normalised scores.
        kinds: Each score's kind: ``binary``, ``ordinal`` or ``continuous``.
        tolerance: Continuous scores within this agree.

    Returns:
        True or False; None when no score was labelled.
    """
    compared = [name for name in kinds if name in labels]
    if not compared:
        return None
    return all(scores_agree(judgement.scores.get(name), labels[name], kind=kinds[name],
                            tolerance=tolerance) for name in compared)


def fit_threshold(confidences: Sequence[float | None], agrees: Sequence[bool], *,
                  guarantee: Guarantee) -> TierFit:
    """The lowest confidence threshold whose accepted verdicts meet the guarantee.

    Args:
        confidences: Each labelled item's confidence at this tier (None: unknown, never
            accepted).
        agrees: Whether each item's verdict agrees with people.
        guarantee: Target agreement, delta and the label minimum.

    Returns:
        The fit; ``threshold`` None when no candidate passes or labels are too few.
    """
    n_items = len(confidences)
    if n_items != len(agrees):
        raise ValueError("confidences and agrees differ in length")
    known = [(c, a) for c, a in zip(confidences, agrees, strict=True)
             if c is not None and np.isfinite(c)]
    if n_items < guarantee.min_labels or not known:
        return TierFit(None, n_items, 0, 0, None)
    conf = np.array([c for c, _ in known], dtype=float)
    wrong = np.array([not a for _, a in known], dtype=np.int64)
    order = np.argsort(-conf, kind="stable")
    conf, wrong = conf[order], wrong[order]
    # Candidate j accepts every item with confidence >= its value: the last of its ties.
    last = np.flatnonzero(np.append(conf[1:] != conf[:-1], True))
    # The sequence starts where a threshold accepts enough items to pass with half the
    # disagreements allowed: a test on a handful could never reject, and its failure would
    # end the search before it began. The start depends on the guarantee and the
    # confidences alone, never on the labels, so the test stays exact.
    last = last[last + 1 >= start_size(guarantee, limit=len(conf))]
    if not last.size:
        return TierFit(None, n_items, 0, 0, None)
    accepted = last + 1
    errors = np.cumsum(wrong)[last]
    p_values = stats.binom.cdf(errors, accepted, 1.0 - guarantee.target)
    failed = np.flatnonzero(p_values > guarantee.delta)
    passing = int(failed[0]) if failed.size else len(last)
    if passing == 0:
        return TierFit(None, n_items, 0, 0, None)
    chosen = passing - 1
    n_accepted, n_errors = int(accepted[chosen]), int(errors[chosen])
    return TierFit(float(conf[last[chosen]]), n_items, n_accepted, n_accepted - n_errors,
                   _lower_agreement(n_accepted, n_errors, delta=guarantee.delta))


def start_size(guarantee: Guarantee, *, limit: int) -> int:
    """Items the first tested threshold accepts: at least ``min_labels``, and enough that
    a judge disagreeing half as often as allowed passes the test.

    Args:
        guarantee: Target and delta.
        limit: Labelled items available (the search stops there).

    Returns:
        The smallest such count, or ``limit`` + 1 when none is within it.
    """
    allowed = 1.0 - guarantee.target
    sizes = np.arange(guarantee.min_labels, max(limit, guarantee.min_labels) + 1)
    passing = stats.binom.cdf(np.floor(sizes * allowed / 2), sizes, allowed) <= guarantee.delta
    return int(sizes[np.argmax(passing)]) if passing.any() else limit + 1


def _lower_agreement(accepted: int, errors: int, *, delta: float) -> float:
    """1 - the one-sided Clopper-Pearson upper bound on the error rate at 1 - delta."""
    if errors >= accepted:
        return 0.0
    return float(1.0 - stats.beta.ppf(1.0 - delta, errors + 1, accepted - errors))


def fit_cascade(items: Sequence[LabelledItem], *, kinds: Mapping[str, str],
                guarantee: Guarantee, fixed: Mapping[int, float] | None = None) -> CascadeFit:
    """Every tier's threshold, cheapest first, each on the items earlier tiers leave.

    Args:
        items: Random review items with people's labels and every tier's verdict.
        kinds: Each score's kind.
        guarantee: What the thresholds must guarantee.
        fixed: Thresholds given, by tier index (a cascade's check tiers, which settle what
            they are decisive on whatever the labels say): not fitted, outside the
            guarantee; their agreement with people is reported all the same.

    Returns:
        The fit. Items people labelled on no score of ``kinds`` are left out.
    """
    usable = [item for item in items if any(name in item.labels for name in kinds)]
    n_tiers = max((len(item.tiers) for item in usable), default=0)
    remaining, fits = usable, []
    for tier in range(n_tiers):
        confidences, agrees = [], []
        for item in remaining:
            judgement = item.tiers[tier] if tier < len(item.tiers) else None
            confidences.append(None if judgement is None else judgement.confidence)
            agrees.append(judgement is not None and bool(item_agrees(
                judgement, item.labels, kinds=kinds, tolerance=guarantee.tolerance)))
        fit = (fit_threshold(confidences, agrees, guarantee=guarantee)
               if fixed is None or tier not in fixed
               else _given(confidences, agrees, threshold=fixed[tier], delta=guarantee.delta))
        fits.append(fit)
        remaining = [item for item, confidence in zip(remaining, confidences, strict=True)
                     if not settles(confidence, fit.threshold)]
    return CascadeFit(tuple(fits), guarantee, len(usable), tuple(sorted(fixed or {})))


def _given(confidences: Sequence[float | None], agrees: Sequence[bool], *, threshold: float,
           delta: float) -> TierFit:
    """A tier whose threshold is given: what it settles, and how well, as a fit would say."""
    accepted = [agree for confidence, agree in zip(confidences, agrees, strict=True)
                if settles(confidence, threshold)]
    errors = accepted.count(False)
    return TierFit(threshold, len(confidences), len(accepted), len(accepted) - errors,
                   _lower_agreement(len(accepted), errors, delta=delta) if accepted else None)
