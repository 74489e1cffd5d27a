"""Corrected estimates of a cascade's traffic when the labels that fit its thresholds also
correct its scores: cross-fitted against fitted on every label, and across a refit.

Setup (estimator level, no server; ``testkit/cascade.py``): ``--traffic`` samples of a
binary score people call correct on 70% of them; a small judge right as often as its
confidence says (uniform 0.55 to 1; ``--lenient``: its mistakes all say "correct"), a
large one right on 93%; a random slice at ``--rate`` labelled. Target 85%, delta 0.05
per tier. Per run and design:

- ``cross-fit K``: thresholds for fold k fitted on the other folds (delta / K), every
  sample judged with its fold's, and the labels, re-scored the same way, correct the mean.
- ``fit on every label``: one fit on all labels, every sample judged with it, and the
  same labels, re-scored with it, correct the mean (what cross-fitting avoids).
- ``stale after refit``: labels of traffic judged before a refit (the large judge alone,
  no fit yet) correct the mean of traffic judged after it (the pooling a refit breaks);
  ``re-scored``: the same labels re-scored with the new cross-fitted thresholds.

Prints, per design, how often the 90% interval held people's mean (0.7), its mean
width and the share the small tier settled.

    python -m bench.cascade_crossfit --runs 500 [--lenient]
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import time
from collections.abc import Sequence

from evalfleet.calibration.cascade import Guarantee, LabelledItem, fit_cascade
from evalfleet.calibration.crossfit import CrossFit, crossfit_cascade, rescored_labels
from evalfleet.core.cascade import fold_of
from evalfleet.core.estimator import LabelledItem as EstimatorItem
from evalfleet.core.estimator import corrected_mean
from evalfleet.core.rescore import kept_scores
from evalfleet.core.sums import RunningSums
from testkit.cascade import TRUE_MEAN, cascade_traffic

KINDS = {"correct": "binary"}


def _score(item: LabelledItem, thresholds: Sequence[float | None]) -> float:
    kept = kept_scores(item.tiers, thresholds)
    return float((kept or {}).get("correct") or 0.0)


def _interval(scores: list[float], labels: list[EstimatorItem]) -> tuple[bool, float]:
    window = RunningSums(len(scores), sum(scores), sum(s * s for s in scores))
    interval = corrected_mean(window, window, labels, confidence=0.9).interval
    return interval.low <= TRUE_MEAN <= interval.high, interval.high - interval.low


def _labels(items: list[LabelledItem], thresholds_of: dict[str, Sequence[float | None]],
            rate: float) -> list[EstimatorItem]:
    return [EstimatorItem(judge=_score(item, thresholds_of[item.sample_id]),
                          label=float(item.labels["correct"] or 0.0), probability=rate,
                          item=item.sample_id) for item in items]


def one_run(seed: int, *, n: int, rate: float,
            lenient: bool) -> dict[str, tuple[bool, float, float]]:
    """Every design's (held, width, share settled small) for one seed."""
    rng = random.Random(seed)
    traffic = cascade_traffic(rng, seed=seed, n=n, rate=rate, lenient=lenient)
    guarantee, results = Guarantee(), {}
    for folds in (2, 5):
        fit = crossfit_cascade(traffic.labelled, metric="m", folds=folds, kinds=KINDS,
                               guarantee=guarantee)
        results[f"cross-fit {folds}"] = _design(traffic.items, traffic.labelled, fit, rate)
    whole = fit_cascade(traffic.labelled, kinds=KINDS, guarantee=guarantee).thresholds
    scores = [_score(item, whole) for item in traffic.items]
    held, width = _interval(scores, _labels(traffic.labelled, dict.fromkeys(
        (i.sample_id for i in traffic.labelled), whole), rate))
    results["fit on every label"] = (held, width, _settled(traffic.items, lambda _: whole))
    # A refit: labels of the traffic before it (judged by the large judge alone) against
    # traffic after it, judged with the new thresholds.
    before = cascade_traffic(rng, seed=seed + 10_000, n=n, rate=rate, lenient=lenient)
    fit = crossfit_cascade(before.labelled, metric="m", folds=2, kinds=KINDS,
                           guarantee=guarantee)
    after = [_score(item, _fold(fit, item)) for item in traffic.items]
    stale = _labels(before.labelled, dict.fromkeys(
        (i.sample_id for i in before.labelled), (None, None)), rate)
    held, width = _interval(after, stale)
    results["stale after refit"] = (held, width, _settled(traffic.items,
                                                          lambda item: _fold(fit, item)))
    fresh = rescored_labels(before.labelled, metric="m", score="correct", fit=fit,
                            probabilities=dict.fromkeys((i.sample_id for i in before.labelled),
                                                        rate))
    held, width = _interval(after, fresh)
    results["re-scored after refit"] = (held, width, results["stale after refit"][2])
    return results


def _fold(fit: CrossFit, item: LabelledItem) -> tuple[float | None, ...]:
    return fit.folds[fold_of(metric="m", sample_id=item.sample_id,
                             folds=len(fit.folds))].thresholds


def _design(items: list[LabelledItem], labelled: list[LabelledItem], fit: CrossFit,
            rate: float) -> tuple[bool, float, float]:
    scores = [_score(item, _fold(fit, item)) for item in items]
    labels = rescored_labels(labelled, metric="m", score="correct", fit=fit,
                             probabilities=dict.fromkeys((i.sample_id for i in labelled), rate))
    held, width = _interval(scores, labels)
    return held, width, _settled(items, lambda item: _fold(fit, item))


def _settled(items: list[LabelledItem], thresholds: object) -> float:
    assert callable(thresholds)
    settled = 0
    for item in items:
        small, threshold = item.tiers[0], thresholds(item)[0]
        settled += bool(small and threshold is not None and small.confidence is not None
                        and small.confidence >= threshold)
    return settled / len(items)


def main() -> None:
    """Run the designs and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--traffic", type=int, default=3000)
    parser.add_argument("--rate", type=float, default=0.15)
    parser.add_argument("--lenient", action="store_true",
                        help="The small judge's mistakes all say correct.")
    args = parser.parse_args()
    started = time.monotonic()
    rows: dict[str, list[tuple[bool, float, float]]] = {}
    for seed in range(args.runs):
        for design, result in one_run(seed, n=args.traffic, rate=args.rate,
                                      lenient=args.lenient).items():
            rows.setdefault(design, []).append(result)
    print("| design | 90% interval held | mean width | settled small |")
    print("|---|---|---|---|")
    for design, results in rows.items():
        held = sum(r[0] for r in results) / len(results)
        print(f"| {design} | {held:.1%} | {statistics.fmean(r[1] for r in results):.4f} "
              f"| {statistics.fmean(r[2] for r in results):.1%} |")
    print(f"\n{args.runs} runs of {args.traffic} samples, slice {args.rate}, lenient small "
          f"judge: {args.lenient}, target 0.85, "
          f"delta 0.05 per tier; {time.monotonic() - started:.0f} s on {platform.node()}")


if __name__ == "__main__":
    main()
