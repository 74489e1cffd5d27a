"""Coverage and width of corrected and raw intervals, and the server time of a corrected estimate.

Part 1, simulated at the estimator level (no store): ``--verdicts`` verdicts (100,000 by
default) whose true score is Beta(5, 2) (mean 0.714), Beta(4, 2) (0.667) in the last tenth
(people's scores drop there, the judge's bias does not); the judge adds 0.15 on 40% of the
traffic, 0.05 elsewhere, plus noise (sd 0.08), not clipped: a judge biased by +0.09 on
average, the same before and after the drop. People's labels are the truth on a random
slice. For each label budget (50, 100, 200, 1,000) and each design (one probability
budget/N for every verdict; strata: judge scores below 0.6 labelled at four times the
rate of the rest, the same budget on average), ``--repeat`` fresh populations and
slices: the share of runs whose 90% interval holds the true mean of the verdicts, and the
median interval width, for the judge's raw mean and for the corrected mean (pool =
window, lam tuned; and the last tenth of the verdicts as the window, corrected by the
whole pool's labels with lam 1).

Part 2, through the real store: a PostgreSQL database of its own
(``evalfleet_bench_estimates``, dropped at the end) with ``--store-verdicts`` rag_qa
verdicts over 30 days (default 200,000: what the shared two-core machine loads in about
a minute through ``SqlStore.save``, not the issue's 2,000,000) and a 1% random review
slice, every item labelled; then the median and p95 of ``--rounds`` timed calls of
what ``evalfleet review estimate`` computes (the reads and the estimator, no process
start): the last 6 hours corrected by 30 days of labels, for all traffic and for one app.

    python -m bench.corrected_estimates
    python -m bench.corrected_estimates --repeat 200 --store-verdicts 50000
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from datetime import UTC, datetime, timedelta

import numpy as np
import psycopg

from evalfleet.core.metric import load_registry
from evalfleet.core.review import MetricSlice, ReviewSlice
from evalfleet.review.estimate import estimate_score
from evalfleet.review.estimator import LabelledItem, Moments, corrected_mean, raw_mean
from evalfleet.store import migrate, open_store
from evalfleet.store.base import VerdictKey, VerdictRecord
from evalfleet.store.estimate import EstimateReads
from evalfleet.store.review import LabelValue, ReviewQueue

POSTGRES_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
DATABASE = "evalfleet_bench_estimates"
BUDGETS = (50, 100, 200, 1000)
CONFIDENCE = 0.9


def population(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """True scores (people's drop in the last tenth) and the judge's (steady bias)."""
    tenth = n // 10
    truth = np.concatenate([rng.beta(5, 2, n - tenth), rng.beta(4, 2, tenth)])
    shift = np.where(rng.random(n) < 0.4, 0.15, 0.05)
    # Not clipped to 0..1: clipping makes the judge's bias depend on where people's scores
    # lie, so the drop would change the bias too (82% coverage at 1,000 labels with it).
    return truth, truth + shift + rng.normal(0, 0.08, n)


def probabilities(judge: np.ndarray, *, budget: int, design: str) -> np.ndarray:
    if design == "uniform":
        return np.full(len(judge), budget / len(judge))
    low = judge < 0.6
    base = budget / (len(judge) + 3 * int(low.sum()))
    return np.where(low, 4 * base, base)


def moments(values: np.ndarray) -> Moments:
    return Moments(n=len(values), total=float(values.sum()), squares=float((values ** 2).sum()))


def one_run(rng: np.random.Generator, *, n: int, budget: int, design: str
            ) -> dict[str, tuple[bool, float]]:
    truth, judge = population(rng, n)
    pi = probabilities(judge, budget=budget, design=design)
    mask = rng.random(n) < pi
    labelled = [LabelledItem(judge=float(f), label=float(y), probability=float(p))
                for f, y, p in zip(judge[mask], truth[mask], pi[mask], strict=True)]
    tail = slice(n - n // 10, n)
    found: dict[str, tuple[bool, float]] = {}
    # The whole pool tunes lam; the last tenth, corrected by the whole pool, takes lam 1.
    for name, window, target, lam in (("all", judge, truth.mean(), None),
                                      ("last tenth", judge[tail], truth[tail].mean(), 1.0)):
        raw = raw_mean(moments(window), confidence=CONFIDENCE)
        corrected = corrected_mean(moments(window), moments(judge), labelled,
                                   confidence=CONFIDENCE, lam=lam).interval
        found[f"raw {name}"] = (raw.low <= target <= raw.high, raw.high - raw.low)
        found[f"corrected {name}"] = (corrected.low <= target <= corrected.high,
                                      corrected.high - corrected.low)
    return found


def coverage(*, n: int, repeat: int, seed: int) -> None:
    print(f"part 1: {n:,} verdicts, {repeat} runs per row, {CONFIDENCE:.0%} intervals, "
          "simulated at the estimator level")
    print(f"{'design':8} {'labels':>6}  {'estimate':22} {'coverage':>8} {'median width':>12}")
    rng = np.random.default_rng(seed)
    for design in ("uniform", "strata"):
        for budget in BUDGETS:
            runs = [one_run(rng, n=n, budget=budget, design=design) for _ in range(repeat)]
            for key in runs[0]:
                held = sum(run[key][0] for run in runs) / repeat
                width = statistics.median(run[key][1] for run in runs)
                print(f"{design:8} {budget:>6}  {key:22} {held:>8.1%} {width:>12.4f}")


def server_time(*, verdicts: int, rounds: int, seed: int) -> None:
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}"')
        admin.execute(f'CREATE DATABASE "{DATABASE}"')
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{DATABASE}"
    try:
        _load_and_time(url, verdicts=verdicts, rounds=rounds, seed=seed)
    finally:
        with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')


def _load_and_time(url: str, *, verdicts: int, rounds: int, seed: int) -> None:
    store = open_store(url, pool_size=2)
    migrate(store.engine)
    worker = open_store(url, pool_size=1, review=ReviewSlice({"rag_qa": MetricSlice(0.01)}))
    rng = np.random.default_rng(seed)
    now = datetime.now(UTC)
    truth, unclipped = population(rng, verdicts)
    judge = np.clip(unclipped, 0, 1)  # stored scores are normalised
    ages = np.sort(rng.random(verdicts))[::-1] * 30 * 86_400
    started = time.perf_counter()
    batch: list[VerdictRecord] = []
    for i in range(verdicts):
        at = now - timedelta(seconds=float(ages[i]))
        batch.append(VerdictRecord(
            key=VerdictKey(f"s-{i}", "rag_qa", "v1", "judge-1"), status="ok",
            error_class=None, error=None, reason="r", scores={"faithfulness": float(judge[i])},
            raw_scores={"faithfulness": float(judge[i])}, raw_output="{}", attempts=1,
            latency_ms=5, prompt_tokens=None, completion_tokens=None,
            attributes={"app": f"app-{i % 8}"}, sample_ts=at, created_at=at, sample=None))
        if len(batch) == 2000 or i == verdicts - 1:
            worker.save(verdicts=batch, owner="bench")
            batch = []
    worker.close()
    queue = ReviewQueue(store)
    items = list(queue.iter_items())
    for item in items:
        value = float(truth[int(item.sample_id.split("-")[1])])
        queue.label(item_id=item.id, reviewer="ann", labels={
            "faithfulness": LabelValue(raw=value, value=value)}, comment=None,
            source="import", now=now, require_lease=False)
    with store.begin() as conn:
        conn.exec_driver_sql("ANALYZE")
    print(f"\npart 2: {verdicts:,} verdicts over 30 days, {len(items):,} labelled random "
          f"items, loaded in {time.perf_counter() - started:.0f} s; Postgres, "
          f"{os.cpu_count()} cores ({platform.processor() or platform.machine()}), shared")
    reads, metric = EstimateReads(store), load_registry().get("rag_qa")
    for segment in ({}, {"app": "app-3"}):
        times, found = [], None
        for _ in range(rounds):
            t0 = time.perf_counter()
            found = estimate_score(reads, metric=metric, score="faithfulness", segment=segment,
                                   start=now - timedelta(hours=6), end=now,
                                   label_start=now - timedelta(days=30), confidence=0.95)
            times.append(time.perf_counter() - t0)
        times.sort()
        assert found is not None
        print(f"segment {segment or '(all)'}: {found.verdicts:,} verdicts in the window, "
              f"{found.labels} labels; median {statistics.median(times) * 1000:.0f} ms, "
              f"p95 {times[int(0.95 * (len(times) - 1))] * 1000:.0f} ms")
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verdicts", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=500)
    parser.add_argument("--store-verdicts", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    coverage(n=args.verdicts, repeat=args.repeat, seed=args.seed)
    if args.store_verdicts:
        server_time(verdicts=args.store_verdicts, rounds=args.rounds, seed=args.seed)


if __name__ == "__main__":
    main()
