"""Live agreement between the judge and reviewers, from the review queue's labels.

Only random items count: items chosen on demand (an alert's evidence, a filter, ids,
imports) lean toward what someone wanted to look at. Each random item is weighted by
the inverse of its inclusion probability, so a slice stratified toward low scores
still estimates the agreement over all the metric's verdicts. An item with several
reviewers' labels counts once, with the labels made one (:mod:`evalfleet.core.labels`).

Per metric, judge model and score:

- yes/no scores: Cohen's kappa and accuracy;
- rubric scores: quadratically weighted kappa, mean absolute error and bias;
- 0..1 scores: mean absolute error and bias.

MAE and bias are on the normalised 0..1 scale, bias as judge minus people (a judge that
scores higher than people shows a positive bias). Each comes with a bootstrap 95%
interval over items (percentile), weights resampled with their items. Reviewer against reviewer:
items (random or not) with two reviewers' labels for a score, the first two reviewers
by name, unweighted.

Loads numpy and scipy: for the CLI, the page and the alert engine, never a worker. The
review queue's items and labels are read through :class:`QueuedItem` and
:class:`GivenLabel`, what this module needs of the store's rows, so the kernel stays
below the store.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol

import numpy as np

from evalfleet.core.agreement import (
    N_RESAMPLES,
    Estimate,
    Statistic,
    bootstrap_estimate,
    cohen_kappa,
)
from evalfleet.core.errors import UnknownMetric
from evalfleet.core.labels import combine_labels, normalise
from evalfleet.core.metric import Metric, MetricRegistry, ScoreKind
from evalfleet.core.review_slice import RANDOM_REASON
from evalfleet.core.scales import ScoreScale, score_scales

#: The "judge model" of reviewer-against-reviewer rows.
REVIEWERS = "(reviewer vs reviewer)"

#: The segment of figures over all items.
ALL = "(all)"

#: Bootstrap resamples per interval of figures computed again and again (the review
#: page's agreement view, the agreement gauges): a yes/no score's kappa over 6,000 items
#: takes about 3 s at 500 resamples, 7.6 s at 1,000.
LIVE_RESAMPLES = 500

#: Fewest labelled items a segment needs for figures of its own.
MIN_SEGMENT_ITEMS = 20


class QueuedItem(Protocol):
    """What live agreement reads of a review item (the store's ``ReviewItem``)."""

    @property
    def id(self) -> int: ...
    @property
    def metric(self) -> str: ...
    @property
    def judge_model(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def probability(self) -> float | None: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def judge_raw_scores(self) -> dict[str, Any]: ...
    @property
    def attributes(self) -> dict[str, str]: ...


class GivenLabel(Protocol):
    """What live agreement reads of a reviewer's label (the store's ``ReviewLabel``)."""

    @property
    def item_id(self) -> int: ...
    @property
    def reviewer(self) -> str: ...
    @property
    def score(self) -> str: ...
    @property
    def raw_value(self) -> Any: ...


@dataclass(frozen=True, slots=True)
class Pair:
    """One item's two values for one score."""

    first_raw: float
    """The judge's (or the first reviewer's) value on the judge's scale."""
    second_raw: float
    """People's (or the second reviewer's) value on the same scale."""
    first: float
    """The first value normalised to 0..1."""
    second: float
    weight: float = 1.0
    """The item's weight: the inverse of its inclusion probability."""


@dataclass(frozen=True)
class LiveAgreement:
    """Agreement on one score of one metric, for one judge model (or between reviewers)."""

    metric: str
    judge_model: str
    """The judge model, or :data:`REVIEWERS`."""
    score: str
    kind: ScoreKind
    items: int
    statistics: dict[str, Estimate]
    """By name: ``kappa``, ``accuracy``; ``weighted_kappa``, ``mae``, ``bias``."""
    segment: str = ALL
    """The items' attribute value (``app=support-bot``), or :data:`ALL`."""


def pair_statistics(pairs: Sequence[Pair], *, kind: ScoreKind,
                    categories: Sequence[float] = (), seed: int = 0,
                    n_resamples: int = N_RESAMPLES) -> dict[str, Estimate]:
    """The agreement statistics of weighted pairs for a score of ``kind``.

    Args:
        pairs: The items' values and weights.
        kind: The score's kind.
        categories: Rubric scores: every value, in order.
        seed: Seed of the bootstrap.
        n_resamples: Bootstrap resamples per interval.

    Returns:
        Each statistic with its interval (None where undefined).
    """
    first_raw = np.array([p.first_raw for p in pairs], dtype=float)
    second_raw = np.array([p.second_raw for p in pairs], dtype=float)
    first = np.array([p.first for p in pairs], dtype=float)
    second = np.array([p.second for p in pairs], dtype=float)
    weight = np.array([p.weight for p in pairs], dtype=float)
    rng = np.random.default_rng(seed)
    # Percentile intervals: BCa's jackknife would cost one statistic per item, and live
    # labels run to thousands (30 s at 6,000 items against 0.x s).
    return {name: bootstrap_estimate(statistic, first_raw, second_raw, first, second, weight,
                                     rng=rng, n_resamples=n_resamples, methods=("percentile",))
            for name, statistic in _statistics(kind, categories=categories).items()}


def _statistics(kind: ScoreKind, *, categories: Sequence[float]) -> dict[str, Statistic]:
    def mae(fr: Any, sr: Any, f: Any, s: Any, w: Any, axis: int = -1) -> Any:
        return np.sum(np.abs(f - s) * w, axis=axis) / np.sum(w, axis=axis)

    def bias(fr: Any, sr: Any, f: Any, s: Any, w: Any, axis: int = -1) -> Any:
        return np.sum((f - s) * w, axis=axis) / np.sum(w, axis=axis)

    if kind == "binary":
        return {
            "kappa": Statistic(lambda fr, sr, f, s, w: cohen_kappa(
                fr, sr, categories=(0.0, 1.0), sample_weight=w), False),
            "accuracy": Statistic(lambda fr, sr, f, s, w, axis=-1: np.sum(
                (fr == sr) * w, axis=axis) / np.sum(w, axis=axis), True),
        }
    if kind == "ordinal":
        levels = [float(value) for value in categories]
        return {
            "weighted_kappa": Statistic(lambda fr, sr, f, s, w: cohen_kappa(
                fr, sr, categories=levels, quadratic=True, sample_weight=w), False),
            "mae": Statistic(mae, True), "bias": Statistic(bias, True),
        }
    return {"mae": Statistic(mae, True), "bias": Statistic(bias, True)}


#: Pairs by metric, judge model (or :data:`REVIEWERS`) and score.
PairsByKey = dict[tuple[str, str, str], list[Pair]]


def live_agreement(items: Iterable[QueuedItem], labels: Iterable[GivenLabel], *,
                   registry: MetricRegistry, since: datetime | None = None,
                   seed: int = 0, n_resamples: int = N_RESAMPLES) -> list[LiveAgreement]:
    """Judge-versus-people agreement from the random items queued since ``since``, and
    reviewer-versus-reviewer agreement, per metric, judge model and score.

    Args:
        items: The queue's items.
        labels: Their labels.
        registry: The metrics, for each score's scale.
        since: Only items queued at or after this time (None: all).
        seed: Seed of the bootstraps.
        n_resamples: Bootstrap resamples per interval.

    Returns:
        One entry per metric, judge model (or :data:`REVIEWERS`) and score with labels.
    """
    metrics: dict[str, Metric] = {}
    judged, between = labelled_pairs(items, labels, registry=registry, since=since,
                                     metrics=metrics)
    found = [_entry(key, pairs, metrics=metrics, seed=seed, n_resamples=n_resamples)
             for key, pairs in sorted(judged.items())]
    found += [_entry(key, pairs, metrics=metrics, seed=seed, n_resamples=n_resamples)
              for key, pairs in sorted(between.items())]
    return found


def segment_agreement(items: Iterable[QueuedItem], labels: Iterable[GivenLabel], *,
                      registry: MetricRegistry, key: str, since: datetime | None = None,
                      min_items: int = MIN_SEGMENT_ITEMS, seed: int = 0,
                      n_resamples: int = N_RESAMPLES) -> list[LiveAgreement]:
    """Judge-versus-people agreement per value of one sample attribute, where the labels
    allow: segments with fewer than ``min_items`` labelled random items are left out.

    Args:
        items: The queue's items.
        labels: Their labels.
        registry: The metrics, for each score's scale.
        key: The attribute (``app``); items without it are in no segment.
        since: Only items queued at or after this time (None: all).
        min_items: Fewest labelled items of a segment's figures.
        seed: Seed of the bootstraps.
        n_resamples: Bootstrap resamples per interval.

    Returns:
        One entry per segment, metric, judge model and score, segment ``key=value``.
    """
    by_value: dict[str, list[QueuedItem]] = defaultdict(list)
    for item in items:
        if key in item.attributes:
            by_value[str(item.attributes[key])].append(item)
    kept = list(labels)
    found = []
    for value, members in sorted(by_value.items()):
        metrics: dict[str, Metric] = {}
        judged, _ = labelled_pairs(members, kept, registry=registry, since=since,
                                   metrics=metrics)
        found += [replace(_entry(pair_key, pairs, metrics=metrics, seed=seed,
                                 n_resamples=n_resamples), segment=f"{key}={value}")
                  for pair_key, pairs in sorted(judged.items()) if len(pairs) >= min_items]
    return found


def labelled_pairs(items: Iterable[QueuedItem], labels: Iterable[GivenLabel], *,
                   registry: MetricRegistry, since: datetime | None = None,
                   metrics: dict[str, Metric] | None = None) -> tuple[PairsByKey, PairsByKey]:
    """The judge's and people's values of every labelled item, paired.

    Args:
        items: The queue's items.
        labels: Their labels.
        registry: The metrics, for each score's scale.
        since: Only items queued at or after this time (None: all).
        metrics: Filled with the metrics met, by name (None: not kept).

    Returns:
        Judge against people (random items only, weighted by the inverse of their
        inclusion probability, several labels made one), and reviewer against reviewer.
    """
    given: dict[int, dict[str, dict[str, Any]]] = defaultdict(lambda: defaultdict(dict))
    for label in labels:
        given[label.item_id][label.score][label.reviewer] = label.raw_value
    judged: PairsByKey = defaultdict(list)
    between: PairsByKey = defaultdict(list)
    metrics = {} if metrics is None else metrics
    for item in items:
        if item.id not in given or (since is not None and item.created_at < since):
            continue
        metric = _metric(registry, item.metric, metrics)
        if metric is None:
            continue
        for score, scale in score_scales(metric).items():
            by_reviewer = given[item.id].get(score, {})
            _add_pairs(item, score=score, scale=scale, metric=metric, by_reviewer=by_reviewer,
                       judged=judged, between=between)
    return dict(judged), dict(between)


def _add_pairs(item: QueuedItem, *, score: str, scale: ScoreScale, metric: Metric,
               by_reviewer: dict[str, Any], judged: PairsByKey, between: PairsByKey) -> None:
    def normalised(raw: float) -> float:
        return normalise(raw, metric=metric, score=score)

    values = {name: float(v) for name, v in sorted(by_reviewer.items()) if v is not None}
    if len(values) >= 2:
        (a, b) = list(values.values())[:2]
        between[(item.metric, REVIEWERS, score)].append(
            Pair(a, b, normalised(a), normalised(b)))
    people = combine_labels(list(values.values()), scale=scale)
    judge = item.judge_raw_scores.get(score)
    if item.reason != RANDOM_REASON or not item.probability or people is None or \
            judge is None:
        return
    judge_raw, people_raw = float(judge), float(people)
    judged[(item.metric, item.judge_model, score)].append(Pair(
        judge_raw, people_raw, normalised(judge_raw), normalised(people_raw),
        weight=1.0 / item.probability))


def _entry(key: tuple[str, str, str], pairs: list[Pair], *, metrics: dict[str, Metric],
           seed: int, n_resamples: int) -> LiveAgreement:
    metric, judge_model, score = key
    scale = score_scales(metrics[metric])[score]
    return LiveAgreement(
        metric=metric, judge_model=judge_model, score=score, kind=scale.kind,
        items=len(pairs), statistics=pair_statistics(
            pairs, kind=scale.kind, categories=scale.categories, seed=seed,
            n_resamples=n_resamples))


def _metric(registry: MetricRegistry, name: str, cache: dict[str, Metric]) -> Metric | None:
    if name not in cache:
        try:
            cache[name] = registry.get(name)
        except UnknownMetric:
            return None
    return cache[name]
