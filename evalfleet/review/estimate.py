"""A score's judge mean and its corrected mean, from the store: what the judge says, and what
people would say, each with its interval.

The raw mean is the judge's, over every production verdict of the window (sample time)
and segment. The corrected mean (:mod:`evalfleet.core.estimator`) adds the judge's
error as measured on the random review items of a longer pool that ends with the window
(:func:`~evalfleet.core.labelpool.label_pool`: on sample time, like the window, whenever
the items were queued; same metric and segment), which assumes the judge's bias is steady over the
pool (:data:`ASSUMPTION`, shown wherever the number is).

Which items count: random items with at least one label for the score (labels of
several reviewers made one, :func:`evalfleet.core.labels.combine_labels`). Items chosen
on demand are refused and counted. Random items without a label (skipped, waiting,
expired) are non-response: within each stratum the labelled ones stand for them, their
inclusion probability multiplied by the stratum's share labelled, which assumes that
within a stratum whether an item was labelled does not depend on its true score.
Below ``min_labels`` labelled items in all, or ``min_stratum_labels`` in any stratum of
the pool (a stratum name and the rate it was sampled at), there is no corrected mean:
"not enough labels", saying which stratum lacks them (``lacking``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from evalfleet.core.errors import InvalidInput
from evalfleet.core.estimator import (
    CONFIDENCE,
    MIN_LABELS,
    MIN_STRATUM_LABELS,
    Interval,
    corrected_mean,
    lacking_labels,
    raw_mean,
    thinnest_df,
)
from evalfleet.core.labelpool import LabelPool, label_pool, pool_labels
from evalfleet.core.metric import Metric
from evalfleet.core.scales import score_scales
from evalfleet.store.queries.cascade_labels import (
    cascade_fit,
    cascade_pool_items,
    cascade_refit,
    since_refit,
)
from evalfleet.store.queries.estimate import EstimateReads

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
    window = (reads.score_sums(metric=metric.name, score=score, start=start, end=end,
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
    pool = (reads.score_sums(metric=metric.name, score=score, start=label_start,
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
