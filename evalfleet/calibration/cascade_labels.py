"""A cascade's labelled items from the review queue, ready for the threshold fit.

The worker judges every sample the random review slice may choose with every tier
(``workers.cascade``), so a random review item carries, in its verdict's ``cascade``
record, every tier's scores, confidence and cost; people's labels come from the queue.
Here they become the items :func:`evalfleet.calibration.cascade_status.cascade_status`
fits on. Left out, and counted: items whose verdict is gone or was not judged by every
tier (the slice was configured after it was judged), and items with no usable label.

The fit's exact binomial bound assumes the labelled items were drawn with equal
probability; a review slice with strata (by judge score, or by confidence: uncertainty
sampling) draws them with several. So the items are thinned to the lowest probability
among them: an item drawn at probability p is kept with probability p_min / p, by a hash
of its sample id salted for this purpose (independent of the review slice's own hash),
which makes the kept items an equal-probability draw at p_min. The labels of the
over-sampled strata still serve the corrected estimates, which weight each stratum; the
fit uses fewer of them (``thinned`` counts those left out).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from evalfleet.calibration.cascade import LabelledItem
from evalfleet.calibration.cascade_status import CostedItem
from evalfleet.core.labels import combine_labels, normaliser
from evalfleet.core.metric import Metric
from evalfleet.core.rescore import number_or_none, tier_entries, tier_judgement
from evalfleet.core.review_slice import salted_fraction
from evalfleet.core.scales import score_scales
from evalfleet.store.queries.cascade import CascadeLabelItem

#: The purpose the thinning hash is salted with.
THINNING_SALT = "cascade-fit"


@dataclass(frozen=True)
class QueueItems:
    """The items a fit can use, and what was left out."""

    items: list[CostedItem]
    not_every_tier: int
    """Items whose verdict is gone or was not judged by every tier."""
    unlabelled: int
    """Items with no usable label (every reviewer said "cannot say", or a tie)."""
    thinned: int = 0
    """Items of over-sampled strata left out to make an equal-probability draw."""


def queue_items(rows: Sequence[CascadeLabelItem], *, metric: Metric) -> QueueItems:
    """Turn the review queue's rows into fit items.

    Args:
        rows: The cascade's labelled random items (``ThresholdBook.labelled_items``).
        metric: The metric, with its ``judge.cascade``.

    Returns:
        The items (an equal-probability draw), and the counts left out.
    """
    n_tiers = len(metric.spec.judge.cascade)
    scales = score_scales(metric)
    scale_of = {name: normaliser(metric=metric, score=name) for name in scales}
    usable: list[tuple[CascadeLabelItem, CostedItem]] = []
    not_every_tier = unlabelled = 0
    for row in rows:
        tried = tier_entries(row.cascade, n_tiers=n_tiers)
        if tried is None:
            not_every_tier += 1
            continue
        labels = {}
        for name, values in row.labels.items():
            if name in scales:
                combined = combine_labels(values, scale=scales[name])
                if combined is not None:
                    labels[name] = scale_of[name](combined)
        if not labels:
            unlabelled += 1
            continue
        if not 0.0 < (row.probability or 0.0) <= 1.0:
            not_every_tier += 1  # no known draw: it cannot stand for the traffic
            continue
        usable.append((row, CostedItem(
            LabelledItem(labels, tuple(tier_judgement(tier) for tier in tried), row.sample_id),
            tuple(number_or_none(tier.get("cost_usd")) for tier in tried),
            tuple(str(tier.get("model")) for tier in tried))))
    lowest = min((float(row.probability or 1.0) for row, _ in usable), default=1.0)
    kept = [item for row, item in usable
            if salted_fraction(THINNING_SALT, metric=metric.name, sample_id=row.sample_id)
            < lowest / float(row.probability or 1.0)]
    return QueueItems(kept, not_every_tier, unlabelled, thinned=len(usable) - len(kept))
