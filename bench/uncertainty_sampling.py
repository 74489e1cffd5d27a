"""Uncertainty sampling against uniform sampling: the corrected mean's interval width at
the same expected number of labels, and the labels uniform sampling would need for the
same width.

Setup: ``--verdicts`` binary verdicts per run, people's answer 1 with probability 0.7.
Each verdict has a confidence uniform on [0.5, 1]. An **honest** judge is right with
probability equal to its confidence; an **uninformative** one (overconfident, or
confident at random) is right on 80% of verdicts whatever its confidence says. The
review slice draws either uniformly at ``--rate``, or by confidence band: verdicts with
confidence below 0.75 (half of them) at ``--low-rate``, the rest at the rate that keeps
the expected labels equal. The corrected mean is the project's estimator
(``evalfleet/core/estimator.py``: prediction-powered, each label weighted by its
inclusion probability, the judge's weight tuned), its interval at 90%; widths are
averaged over ``--runs`` runs. Width shrinks as one over the square root of the labels,
so uniform sampling needs (width ratio)^2 times the labels for the same width.

    python -m bench.uncertainty_sampling --verdicts 20000 --runs 200
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

from evalfleet.core.estimator import LabelledItem, corrected_mean
from evalfleet.core.sums import RunningSums

#: Confidences below this form the over-sampled band.
BAND = 0.75


def one_run(rng: np.random.Generator, *, verdicts: int, honest: bool, rate: float,
            low_rate: float | None) -> float:
    """The interval width of one run's corrected mean (uniform when ``low_rate`` is None)."""
    truth = (rng.random(verdicts) < 0.7).astype(float)
    confidence = rng.uniform(0.5, 1.0, verdicts)
    right = rng.random(verdicts) < (confidence if honest else 0.8)
    judge = np.where(right, truth, 1.0 - truth)
    if low_rate is None:
        probability = np.full(verdicts, rate)
    else:
        low = confidence < BAND
        high_rate = (rate - low_rate * low.mean()) / (1.0 - low.mean())
        probability = np.where(low, low_rate, high_rate)
    drawn = rng.random(verdicts) < probability
    window = RunningSums(n=verdicts, total=float(judge.sum()),
                         total_sq=float((judge ** 2).sum()))
    labelled = [LabelledItem(judge=float(judge[i]), label=float(truth[i]),
                             probability=float(probability[i]))
                for i in np.flatnonzero(drawn)]
    interval = corrected_mean(window, window, labelled, confidence=0.9).interval
    return interval.high - interval.low


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verdicts", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rate", type=float, default=0.01)
    parser.add_argument("--low-rate", type=float, action="append",
                        help="Rate of the unsure band (repeatable; default 0.0127 and 0.016).")
    args = parser.parse_args()
    low_rates = args.low_rate or [0.0127, 0.016]
    started = time.perf_counter()
    print("| judge | sampling | expected labels | mean 90% width | labels uniform needs "
          "for that width |")
    print("|---|---|---|---|---|")
    for honest in (True, False):
        rng = np.random.default_rng(7)
        uniform = np.mean([one_run(rng, verdicts=args.verdicts, honest=honest, rate=args.rate,
                                   low_rate=None) for _ in range(args.runs)])
        labels = args.verdicts * args.rate
        judge = "honest" if honest else "uninformative"
        print(f"| {judge} | uniform {args.rate:g} | {labels:.0f} | {uniform:.4f} | "
              f"{labels:.0f} |")
        for low_rate in low_rates:
            rng = np.random.default_rng(7)
            banded = np.mean([one_run(rng, verdicts=args.verdicts, honest=honest,
                                      rate=args.rate, low_rate=low_rate)
                              for _ in range(args.runs)])
            print(f"| {judge} | by confidence ({low_rate:g} below {BAND}) | {labels:.0f} | "
                  f"{banded:.4f} | {labels * (uniform / banded) ** 2:.0f} |")
    print(f"setup: {args.verdicts} verdicts a run, {args.runs} runs, people's rate 0.7, "
          f"confidence uniform on [0.5, 1]; {platform.python_version()} on "
          f"{platform.machine()}, {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
