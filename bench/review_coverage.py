"""Coverage of corrected intervals for every review slice design the settings allow: a
uniform slice, a stratified one, and a stratified one whose heavy (low-rate) stratum is
thin; each either holds its stated level or is refused as "not enough labels".

Simulated at the estimator level (``testkit/coverage_simulation.py``, no store): per row,
``--runs`` seeded runs (2,000 by default) of one design, each a fresh window, pool and
slice, estimated as ``evalfleet review estimate`` does (the minimum of labels in all and
per stratum, ``evalfleet.core.estimator.lacking_labels``). Printed per row: the median
labels and labels of the thinnest stratum, the share of runs refused, the share of the
others whose 90% interval held the process mean (the estimand) and the window's own mean,
the median width, and what the rule before (100 labels in all, a normal interval) held.

    python -m bench.review_coverage
    python -m bench.review_coverage --runs 500 --seed 2
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import time

import numpy as np

from evalfleet.core.estimator import MIN_LABELS, MIN_STRATUM_LABELS
from testkit.coverage_simulation import Design, Run, simulate

CONFIDENCE = 0.9

DESIGNS = tuple(
    Design(name, kind, window, pool, low, rest)
    for kind in ("continuous", "yes/no")
    for name, window, pool, low, rest in (
        ("uniform 25%", 1000, 1000, 0.25, 0.25),
        ("uniform 10%", 1000, 1000, 0.10, 0.10),
        ("stratified 0.5 / 0.06", 1000, 1000, 0.5, 0.06),
        ("stratified 0.5 / 0.06", 3000, 3000, 0.5, 0.06),
        ("stratified 0.5 / 0.06, thin heavy stratum", 400, 400, 0.5, 0.06),
        ("stratified 0.5 / 0.02", 4000, 4000, 0.5, 0.02),
        ("pooled, uniform 5%", 1000, 5000, 0.05, 0.05),
        ("pooled, stratified 0.3 / 0.02", 1000, 5000, 0.3, 0.02),
    ))


def row(design: Design, *, runs: int, seed: int, index: int) -> dict[str, float]:
    """One design's figures over ``runs`` seeded runs."""
    rng = np.random.default_rng([seed, index])
    found: list[Run] = [simulate(design, rng, confidence=CONFIDENCE) for _ in range(runs)]
    kept = [run for run in found if run.lacking is None]
    before = [run for run in found if not run.lacking_overall]
    return {
        "labels": statistics.median(run.labels for run in found),
        "thinnest": statistics.median(run.thinnest for run in found),
        "refused": 1 - len(kept) / runs,
        "held": _share([run.held for run in kept]),
        "held_window": _share([run.held_window for run in kept]),
        "width": statistics.median(run.width for run in kept) if kept else math.nan,
        "held_before": _share([run.held_normal for run in before]),
    }


def _share(flags: list[bool]) -> float:
    return sum(flags) / len(flags) if flags else math.nan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(f"review slice coverage: {args.runs:,} seeded runs per row (seed {args.seed}), "
          f"{CONFIDENCE:.0%} intervals, at least {MIN_LABELS} labels and "
          f"{MIN_STRATUM_LABELS} per stratum; {platform.python_version()}, "
          f"{os.cpu_count()} CPUs")
    print("| design | score | window / pool | labels | thinnest stratum | refused "
          "| held, process mean | held, window's own mean | width | held before "
          "(100 in all, normal) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    started = time.perf_counter()
    for index, design in enumerate(DESIGNS):
        f = row(design, runs=args.runs, seed=args.seed, index=index)
        print(f"| {design.name} | {design.kind} | {design.window:,} / {design.pool:,} "
              f"| {f['labels']:.0f} | {f['thinnest']:.0f} | {f['refused']:.1%} "
              f"| {_pct(f['held'])} | {_pct(f['held_window'])} | {_num(f['width'])} "
              f"| {_pct(f['held_before'])} |", flush=True)
    print(f"({time.perf_counter() - started:.0f} s)")


def _pct(value: float) -> str:
    return "refused" if value != value else f"{value:.1%}"


def _num(value: float) -> str:
    return "-" if value != value else f"{value:.3f}"


if __name__ == "__main__":
    main()
