"""What a review_agreement rule reads: the judge's live agreement with reviewers.

The pairs are the ones ``evalfleet review status`` computes its figures from
(:func:`evalfleet.core.live_agreement.labelled_pairs`): random items only, several
reviewers' labels made one, each item weighted by the inverse of its inclusion
probability. Each item's agreement is one value: for a yes/no score 1 when the judge
and people agree and 0 when not (a proportion, tested as one); for a rubric or a 0..1
score one minus their distance on the 0..1 scale (tested as a continuous value).

A window holds the items queued in it (when their verdict was stored), with the labels
they have so far. The summary of a window is weighted: its mean is the weighted mean
and its count the effective number of items (Kish's ``(sum w)^2 / sum w^2``), so a
slice stratified toward low scores is neither over-trusted nor biased. Segments: the
whole, and each judge model.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime

from evalfleet.alerts.rule import Rule
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.statistic import Summary
from evalfleet.core.live_agreement import (
    LIVE_RESAMPLES,
    LiveAgreement,
    Pair,
    labelled_pairs,
    live_agreement,
)
from evalfleet.core.metric import MetricRegistry
from evalfleet.store.queries.review_queue import ReviewQueue

#: The segment key of a review_agreement rule's judge models.
JUDGE_MODEL = "judge_model"


def agreement_value(pair: Pair, *, binary: bool) -> float:
    """One item's agreement between the judge and people, in 0..1.

    Args:
        pair: The judge's and people's values.
        binary: True for a yes/no score.

    Returns:
        1 or 0 for a yes/no score; else one minus the distance on the 0..1 scale.
    """
    if binary:
        return float(pair.first_raw == pair.second_raw)
    return 1.0 - min(1.0, abs(pair.first - pair.second))


def weighted_summary(values: Sequence[float], weights: Sequence[float], *,
                     binary: bool) -> Summary:
    """A window's agreement values summarised for the tests, weights and all.

    Args:
        values: One agreement value per item.
        weights: Their weights (inverse inclusion probabilities).
        binary: True for yes/no agreement: the count of agreeing items is then whole.

    Returns:
        A summary with the weighted mean and variance over the effective item count.
    """
    total_w = sum(weights)
    if not values or total_w <= 0:
        return Summary(n=0)
    n = max(1, round(total_w ** 2 / sum(w * w for w in weights)))
    mean = sum(v * w for v, w in zip(values, weights, strict=True)) / total_w
    if binary:
        agreed = float(round(mean * n))
        return Summary(n=n, total=agreed, total_sq=agreed)
    second = sum(v * v * w for v, w in zip(values, weights, strict=True)) / total_w
    return Summary(n=n, total=mean * n, total_sq=second * n)


class AgreementSource:
    """The review queue, read for review_agreement rules and agreement gauges.

    Args:
        queue: The review queue of the verdict store.
        registry: The metrics, for each score's scale.
    """

    def __init__(self, queue: ReviewQueue, registry: MetricRegistry) -> None:
        self.queue = queue
        self.registry = registry

    def summaries(self, rule: Rule, *, start: datetime, end: datetime) -> dict[Segment, Summary]:
        """The rule's agreement per segment over the items queued in ``[start, end)``.

        Args:
            rule: A review_agreement rule.
            start, end: The window.

        Returns:
            The whole (always, empty when nothing was labelled) and each judge model.
        """
        spec = rule.spec
        judged, _ = labelled_pairs(
            self.queue.iter_items(metric=spec.metric, since=start, until=end),
            self.queue.iter_labels(metric=spec.metric, since=start, until=end),
            registry=self.registry)
        binary = rule.score_kind == "binary"
        values: dict[Segment, list[float]] = defaultdict(list)
        weights: dict[Segment, list[float]] = defaultdict(list)
        for (_metric, judge_model, score), pairs in judged.items():
            if score != spec.score:
                continue
            for segment in (Segment(), Segment(((JUDGE_MODEL, judge_model),))):
                values[segment] += [agreement_value(p, binary=binary) for p in pairs]
                weights[segment] += [p.weight for p in pairs]
        found = {segment: weighted_summary(values[segment], weights[segment], binary=binary)
                 for segment in values}
        found.setdefault(Segment(), Summary(n=0))
        return found

    def figures(self, *, since: datetime) -> list[LiveAgreement]:
        """Every metric's agreement figures since ``since``, as ``review status`` shows
        them (with :data:`~evalfleet.core.live_agreement.LIVE_RESAMPLES` per interval).

        Args:
            since: Items queued at or after this time.

        Returns:
            The figures per metric, judge model (or reviewers) and score.
        """
        return live_agreement(self.queue.iter_items(since=since),
                              self.queue.iter_labels(since=since), registry=self.registry,
                              n_resamples=LIVE_RESAMPLES)
