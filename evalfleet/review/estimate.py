"""A score's judge mean and its corrected mean, from the store: what the judge says, and what
people would say, each with its interval.

The raw mean is the judge's, over every production verdict of the window (sample time)
and segment. The corrected mean (:mod:`evalfleet.review.estimator`) adds the judge's
error as measured on the random review items of a longer pool that ends with the window
(:func:`label_pool`: on sample time, like the window, whenever the items were queued;
same metric and segment), which assumes the judge's bias is steady over the
pool (:data:`ASSUMPTION`, shown wherever the number is).

Which items count: random items with at least one label for the score (labels of
several reviewers made one, :func:`evalfleet.review.label.combine_labels`). Items chosen
on demand are refused and counted. Random items without a label (skipped, waiting,
expired) are non-response: within each stratum the labelled ones stand for them, their
inclusion probability multiplied by the stratum's share labelled, which assumes that
within a stratum whether an item was labelled does not depend on its true score.
Below ``min_labels`` labelled items in all, or ``min_stratum_labels`` in any stratum of
the pool (a stratum name and the rate it was sampled at), there is no corrected mean:
"not enough labels", saying which stratum lacks them (``lacking``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from evalfleet.core.cascade import metric_cascade_identity
from evalfleet.core.durations import format_moment
from evalfleet.core.errors import InvalidInput
from evalfleet.core.metric import Metric
from evalfleet.core.review import RANDOM_REASON
from evalfleet.core.scales import score_scales
from evalfleet.review.estimator import (
    CONFIDENCE,
    MIN_LABELS,
    MIN_STRATUM_LABELS,
    Interval,
    LabelledItem,
    Moments,
    StratumLabels,
    corrected_mean,
    lacking_labels,
    raw_mean,
    thinnest_df,
)
from evalfleet.review.label import combine_labels, normaliser
from evalfleet.store.cascade import StoredThresholds
from evalfleet.store.estimate import EstimateReads, PoolItem, ScoreSums

#: How far back labels correct a window by default (the CLI's --label-window, the pages).
LABEL_WINDOW = timedelta(days=30)

#: What a corrected mean assumes, shown beside it.
ASSUMPTION = ("assumes the judge's bias (its scores minus people's) is steady over the label "
              "window, and that labelled items stand for the unlabelled random items of "
              "their stratum")

#: Status of an estimate with a corrected mean.
OK = "ok"
#: Status when fewer labelled random items than the minimum are in the pool, or in one of
#: its strata.
NOT_ENOUGH_LABELS = "not enough labels"
#: Status when the window has no verdicts.
NO_VERDICTS = "no verdicts"
#: Status of a check metric's score: computed by code, there is no judge error to correct
#: (its verdicts never enter the random review slice).
CHECK_SCORE = "a check: no correction"


@dataclass(frozen=True)
class ScoreEstimate:
    """One score of one metric in a segment and window: the judge's mean and the corrected one."""

    metric: str
    score: str
    segment: dict[str, str]
    start: datetime
    """Window start (sample time, inclusive)."""
    end: datetime
    """Window end (exclusive); the label pool ends here too."""
    label_start: datetime
    """Start of the pool whose labels correct the window (sample time, :func:`label_pool`)."""
    verdicts: int
    """Verdicts in the window."""
    raw: Interval | None
    """The judge's mean and interval; None without verdicts."""
    corrected: Interval | None
    """The corrected mean and interval; None with too few labels."""
    labels: int
    """Labelled random items behind the correction."""
    status: str
    """:data:`OK`, :data:`NOT_ENOUGH_LABELS` or :data:`NO_VERDICTS`."""
    lam: float | None = None
    """The judge's weight: tuned (0..1) when the pool is the window, else 1."""
    pool_verdicts: int = 0
    """Verdicts in the pool."""
    unlabelled: int = 0
    """Random items of the pool with no label for the score (non-response)."""
    refused: int = 0
    """Labelled items of the pool chosen on demand, left out."""
    min_labels: int = MIN_LABELS
    confidence: float = CONFIDENCE
    assumption: str = field(default=ASSUMPTION)
    min_stratum_labels: int = MIN_STRATUM_LABELS
    lacking: str | None = None
    """With :data:`NOT_ENOUGH_LABELS`: which labels are missing (``64 of 100 labels``,
    ``stratum 'rest' at rate 0.06 has 12 of 30 labels``)."""
    cascade_labels: str | None = None
    """A fitted cascade's metric: how its labels measure the thresholds in use (re-scored
    when cross-fitted, else the pool starts at the last refit), :func:`cascade_refit`."""


    @property
    def pool(self) -> LabelPool:
        """Where the labels behind the corrected mean come from."""
        return LabelPool(start=self.label_start, end=self.end)


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


def estimate_score(reads: EstimateReads, *, metric: Metric, score: str,
                   segment: Mapping[str, str], start: datetime, end: datetime,
                   label_start: datetime, filters: Mapping[str, Sequence[str]] = {},
                   min_labels: int = MIN_LABELS, min_stratum_labels: int = MIN_STRATUM_LABELS,
                   confidence: float = CONFIDENCE) -> ScoreEstimate:
    """The judge's mean of ``score`` over the window and its corrected mean.

    Args:
        reads: The store's reads.
        metric: The metric.
        score: One of its scores.
        segment: Attributes the verdicts (and items) must have; empty for all.
        filters: Attributes they must have one of the values of (a rule's filters).
        start: Window start (sample time).
        end: Window end; the pool ends here too.
        label_start: Pool start on sample time (:func:`label_pool`).
        min_labels: Fewest labelled random items for a corrected mean.
        min_stratum_labels: Fewest in each stratum of the pool.
        confidence: Coverage of both intervals.

    Returns:
        The estimate; its status (and ``lacking``) says why a number is missing.
    """
    fit = cascade_fit(reads, metric=metric)
    label_start = label_pool(start=start, end=end,
                             label_start=since_refit(fit, label_start=label_start)).start
    window = _moments(reads.score_sums(metric=metric.name, score=score, start=start, end=end,
                                       segment=segment, filters=filters))
    empty = ScoreEstimate(
        metric=metric.name, score=score, segment=dict(segment), start=start, end=end,
        label_start=label_start, verdicts=window.n, raw=None, corrected=None, labels=0,
        status=NO_VERDICTS, min_labels=min_labels, confidence=confidence,
        min_stratum_labels=min_stratum_labels)
    if window.n == 0:
        return empty
    if metric.spec.kind == "check":
        return replace(empty, raw=raw_mean(window, confidence=confidence), status=CHECK_SCORE)
    pool = _moments(reads.score_sums(metric=metric.name, score=score, start=label_start,
                                     end=end, segment=segment, filters=filters))
    items, not_rescored = cascade_pool_items(reads, metric=metric, fit=fit,
                                             start=label_start, end=end)
    found = pool_labels(items, metric=metric, score=score, segment=segment, filters=filters)
    lacking = lacking_labels(found.strata, min_labels=min_labels,
                             min_stratum_labels=min_stratum_labels)
    usable = lacking is None and pool.n >= max(window.n, len(found.items))
    # Power tuning only when the labels are the window's own (see the estimator's module).
    lam = None if label_start >= start else 1.0
    corrected = corrected_mean(window, pool, found.items, confidence=confidence, lam=lam,
                               df=thinnest_df(found.strata)) if usable else None
    return replace(
        empty, raw=raw_mean(window, confidence=confidence),
        corrected=corrected.interval if corrected else None, labels=len(found.items),
        status=OK if corrected else NOT_ENOUGH_LABELS, lam=corrected.lam if corrected else None,
        pool_verdicts=pool.n, unlabelled=found.unlabelled, refused=found.refused,
        lacking=None if corrected else lacking,
        cascade_labels=None if fit is None else cascade_refit(
            fit, start=start, not_rescored=not_rescored))


def cascade_fit(reads: EstimateReads, *, metric: Metric) -> StoredThresholds | None:
    """The thresholds a cascade metric is judged with now; None for a metric without a
    cascade, or before its first fit."""
    if not metric.spec.judge.cascade:
        return None
    return reads.cascade_fit(metric=metric.name, identity=metric_cascade_identity(metric))


def since_refit(fit: StoredThresholds | None, *, label_start: datetime) -> datetime:
    """Where a label pool may start under ``fit``: a refit that is not cross-fitted is a
    judge change, so no earlier than it (:func:`cascade_refit`); else ``label_start``.
    Pass the result through :func:`label_pool` (a window's own labels always count)."""
    if fit is not None and not fit.folds:
        return max(label_start, fit.created_at)
    return label_start


def cascade_pool_items(reads: EstimateReads, *, metric: Metric, fit: StoredThresholds | None,
                       start: datetime, end: datetime) -> tuple[list[PoolItem], int]:
    """A label pool's review items, each random one re-scored with its fold's
    thresholds when ``fit`` is cross-fitted
    (:func:`evalfleet.calibration.crossfit.rescored_pool`); as stored otherwise. What
    every corrected number of a cascade metric reads its labels from (the estimates and
    the alerts' judge check).

    Returns:
        The items, and how many labelled random items could not be re-scored (left out).
    """
    crossed = fit is not None and bool(fit.folds)
    items = reads.pool_items(metric=metric.name, start=start, end=end, with_cascade=crossed)
    if fit is None or not crossed:
        return items, 0
    from evalfleet.calibration.crossfit import rescored_pool  # numpy: not in workers

    rescored = rescored_pool(items, metric=metric, folds=fit.folds)
    return rescored.items, rescored.not_rescored


def cascade_refit(fit: StoredThresholds, *, start: datetime, not_rescored: int = 0) -> str:
    """How a cascade's labels correct a window judged with ``fit``, as every place that
    shows a corrected number says it. Pure.

    A refit changes the cascade's error (what each tier settles), so labels of verdicts
    judged before it measure another judge. Cross-fitted thresholds let every labelled
    item be re-scored with the thresholds in use (its fold's, which never saw its
    label), so the pool keeps its length; otherwise the pool starts at the refit.

    Args:
        fit: The thresholds in use.
        start: The window's start.
        not_rescored: Labelled items left out for lacking a tier's verdict.
    """
    when = format_moment(fit.created_at)
    if fit.folds:
        text = (f"cascade thresholds version {fit.version} ({when}) are cross-fitted over "
                f"{len(fit.folds)} folds: labels re-scored with the thresholds in use, each "
                "item with its fold's (fitted without its label), so labels from before the "
                "refit count")
        if not_rescored:
            text += (f"; {not_rescored} labelled items without every tier's verdict left "
                     "out")
    else:
        text = (f"cascade thresholds version {fit.version} ({when}) are not cross-fitted: "
                "a refit is a judge change, so the label pool starts no earlier than it")
    if fit.created_at > start:
        text += "; the window starts before that refit, so its verdicts mix two cascades"
    return text


def _moments(sums: ScoreSums) -> Moments:
    return Moments(n=sums.n, total=sums.total, squares=sums.squares)


def estimate_record(estimate: ScoreEstimate) -> dict[str, Any]:
    """One estimate as plain JSON values (times as ISO 8601)."""
    record = asdict(estimate)
    for name in ("start", "end", "label_start"):
        record[name] = record[name].isoformat()
    record["pool"] = estimate.pool.text()
    return record


def estimate_text(estimate: ScoreEstimate) -> tuple[str, str]:
    """The judge's mean and the corrected one as a table shows them."""
    def interval(found: Interval | None) -> str:
        return "-" if found is None else \
            f"{found.value:.3f} [{found.low:.3f}, {found.high:.3f}]"

    corrected = interval(estimate.corrected) if estimate.corrected else estimate.status
    if estimate.lacking:
        corrected += f": {estimate.lacking}"
    return interval(estimate.raw), corrected


def metric_estimates(reads: EstimateReads, *, metric: Metric, scores: Sequence[str] = (),
                     segment: Mapping[str, str] = {},
                     filters: Mapping[str, Sequence[str]] = {}, start: datetime,
                     end: datetime, label_start: datetime, min_labels: int = MIN_LABELS,
                     min_stratum_labels: int = MIN_STRATUM_LABELS,
                     confidence: float = CONFIDENCE) -> list[ScoreEstimate]:
    """:func:`estimate_score` for each of ``scores`` (default: every score of the metric).

    Raises:
        InvalidInput: A score the metric does not have.
    """
    known = list(score_scales(metric))
    for score in scores:
        if score not in known:
            raise InvalidInput(f"{metric.name} has no score {score!r} (it has "
                               f"{', '.join(known)})")
    return [estimate_score(reads, metric=metric, score=score, segment=segment, filters=filters,
                           start=start, end=end, label_start=label_start,
                           min_labels=min_labels, min_stratum_labels=min_stratum_labels,
                           confidence=confidence)
            for score in scores or known]
