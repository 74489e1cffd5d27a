"""The label pool of a window: which review items' labels correct it, and how. Pure.

A window's verdicts are chosen on sample time, and so are the review items whose labels
correct it: those sampled from the pool's start (earlier than the window's, for enough
labels) to the window's end, whenever they were queued. Of those, only random items
count, each with its inclusion probability; random items without a label are
non-response, stood for within their stratum by the labelled ones. The one place that
says both, for the estimates, ``review status``, the alert page and the alert engine's
judge check alike.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from evalfleet.core.durations import format_moment
from evalfleet.core.estimator import LabelledItem, StratumLabels
from evalfleet.core.labels import combine_labels, normaliser
from evalfleet.core.metric import Metric
from evalfleet.core.review_slice import RANDOM_REASON
from evalfleet.core.scales import score_scales


@dataclass(frozen=True)
class PoolItem:
    """One review item of a pool, with its reviewers' labels."""

    id: int
    sample_id: str
    reason: str
    """``random`` or what chose it."""
    probability: float | None
    stratum: str | None
    judge_scores: dict[str, float | None]
    """The judge's normalised scores."""
    attributes: dict[str, str]
    labels: dict[str, list[Any]] = field(default_factory=dict)
    """By score: each reviewer's value on the judge's scale (None: cannot say)."""
    cascade: dict[str, Any] | None = None
    """The verdict's cascade record (every tier's scores and confidence), when asked for
    and the verdict is kept; a cascade's labels are re-scored from it."""


@dataclass(frozen=True, slots=True)
class LabelPool:
    """The review items whose labels correct a window: those whose samples were taken in
    ``[start, end)``, the time the window's verdicts are chosen on (not when the item was
    queued: items queued for older samples correct the windows of those samples)."""

    start: datetime
    end: datetime

    def text(self) -> str:
        """The pool's bounds, as every place that shows a corrected number says them."""
        return (f"labels of random items sampled from {format_moment(self.start)} to "
                f"{format_moment(self.end)}")


def label_pool(*, start: datetime, end: datetime, label_start: datetime) -> LabelPool:
    """The label pool of the window ``[start, end)``: samples taken from ``label_start``
    (or the window's start, if earlier) up to the window's end. The one place that says
    which labels correct a window: the estimates, ``review status``, the alert page and
    the alert's judge check all take their pool from here. Pure."""
    return LabelPool(start=min(label_start, start), end=end)


@dataclass(frozen=True, slots=True)
class PoolLabels:
    """A pool's usable labelled items for one score, and what was left out."""

    items: list[LabelledItem]
    unlabelled: int
    refused: int
    strata: list[StratumLabels] = field(default_factory=list)
    """Each stratum (name and rate) with random items: labelled and random counts."""


def pool_labels(pool: Sequence[PoolItem], *, metric: Metric, score: str,
                segment: Mapping[str, str],
                filters: Mapping[str, Sequence[str]] = {}) -> PoolLabels:
    """The labelled random items of the segment for ``score``, their probabilities adjusted
    for non-response within each stratum. Pure.

    Args:
        pool: The pool's review items.
        metric: Their metric.
        score: The score estimated.
        segment: Attributes an item must have.
        filters: Attributes an item must have one of the values of.

    Returns:
        The usable items (probability times the stratum's share labelled), the random items
        with no label, and the labelled items refused: chosen ones, and any whose recorded
        probability is not in (0, 1].
    """
    scale = score_scales(metric)[score]
    to_unit = normaliser(metric=metric, score=score)
    found: list[tuple[PoolItem, tuple[str | None, float], float, float]] = []
    random_by_stratum: Counter[tuple[str | None, float]] = Counter()
    refused = unlabelled = 0
    for item in pool:
        if any(item.attributes.get(k) != v for k, v in segment.items()) or \
                any(item.attributes.get(k) not in v for k, v in filters.items()):
            continue
        people = combine_labels(item.labels.get(score, []), scale=scale)
        judge = item.judge_scores.get(score)
        if item.reason != RANDOM_REASON or not 0.0 < (item.probability or 0.0) <= 1.0:
            refused += people is not None
            continue
        if judge is None:
            continue
        stratum = (item.stratum, float(item.probability or 0.0))
        random_by_stratum[stratum] += 1
        if people is None:
            unlabelled += 1
            continue
        found.append((item, stratum, float(judge), to_unit(people)))
    labelled_by_stratum = Counter(stratum for _, stratum, _, _ in found)
    items = [LabelledItem(
        judge=judge, label=label, item=item.sample_id,
        probability=stratum[1] * labelled_by_stratum[stratum] / random_by_stratum[stratum])
        for item, stratum, judge, label in found]
    strata = [StratumLabels(name=f"'{name or 'rest'}' at rate {rate:g}",
                            labelled=labelled_by_stratum[(name, rate)], random=random)
              for (name, rate), random in sorted(random_by_stratum.items(),
                                                 key=lambda kv: (kv[0][0] or "rest", kv[0][1]))]
    return PoolLabels(items=items, unlabelled=unlabelled, refused=refused, strata=strata)
