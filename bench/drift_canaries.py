"""How fast judge_drift catches a drifting judge, and how often it cries wolf on a steady one.

Setup: the shipped ``rag_qa_judge_drift`` rule (window 1h, interval 5m, min_samples 10,
min_effect 0.1, for 2, recovery 2) fed at the default canary rate (4 gold samples every
5 minutes, rotating through the shipped 24-item ``rag_qa`` gold set). A synthetic judge
scores each canary as its label plus Gaussian noise (``--noise``, clipped to 0..1); its
calibration is one pass over the gold set with the same noise. The engine's own pure
steps run each cycle (``examine_drift``, ``judge`` with Benjamini-Hochberg, the state
machine ``advance``), so only the database is left out.

Printed: for a steady judge, the share of simulated days with at least one firing; for
each shift of the judge's scores (and, for a binary score, each share of answers
flipped, with a judge 95% right at calibration), the median and 90th percentile of the
cycles from the change to firing, and how many runs never fired within a day.

    python -m bench.drift_canaries                 # 40 steady days, 100 runs per change
    python -m bench.drift_canaries --days 10 --runs 30   # a quick look
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import UTC, datetime, timedelta

import numpy as np

from evalfleet.alerts.detector import DriftBaseline, examine_drift, judge
from evalfleet.alerts.rule import Rule, load_rules
from evalfleet.alerts.state import AlertState, Policy, advance
from evalfleet.alerts.statistic import Summary
from evalfleet.core.canary import canary_series
from evalfleet.core.gold import bundled_gold, load_gold
from evalfleet.core.metric import load_registry
from evalfleet.core.scales import score_scales

#: Cycles in a day at the shipped 5-minute interval.
CYCLES_PER_DAY = 288

#: Canaries per slot (the default ``EVALFLEET_CANARY_SAMPLES``).
PER_SLOT = 4

#: Accuracy of the binary judge at calibration.
BINARY_ACCURACY = 0.95


def shipped_rule(name: str) -> Rule:
    return next(r for r in load_rules(None, registry=load_registry()).rules if r.name == name)


def summarise(pairs: list[tuple[float, float]], *, scales: dict, score: str) -> tuple[
        list[float], list[float]]:
    agreement, bias = [], []
    for judged, label in pairs:
        series = canary_series({score: judged}, {score: label}, scales=scales)
        agreement.append(series[f"canary:{score}"])
        bias.append(series[f"canary_bias:{score}"])
    return agreement, bias


class Judge:
    """A synthetic judge: continuous (label + noise + shift) or binary (right or flipped)."""

    def __init__(self, rng: np.random.Generator, *, binary: bool, noise: float) -> None:
        self.rng, self.binary, self.noise = rng, binary, noise
        self.change = 0.0

    def score(self, label: float) -> float:
        if self.binary:
            wrong = self.rng.random() > BINARY_ACCURACY
            flipped = self.rng.random() < self.change
            return float(label) if wrong == flipped else 1.0 - label
        return float(np.clip(label + self.rng.normal(0, self.noise) + self.change, 0, 1))


def run(rule: Rule, labels: list[float], *, judge_: Judge, scales: dict, score: str,
        change: float | None, cycles: int) -> int | None:
    """Cycles from the change (or from the start, steady) to the first firing; None: never."""
    spec = rule.spec
    policy = Policy(for_count=spec.for_count, recovery_count=spec.recovery.for_count,
                    renotify=spec.renotify, no_data=spec.no_data)
    agreement, bias = summarise([(judge_.score(x), x) for x in labels], scales=scales,
                                score=score)
    baseline = DriftBaseline(Summary.of_values(agreement), Summary.of_values(bias), "bench")
    window_slots = int(spec.window / spec.interval)
    warm = window_slots + 1
    slots: list[tuple[list[float], list[float]]] = []
    state = AlertState.initial(datetime(2026, 1, 1, tzinfo=UTC))
    for cycle in range(warm + cycles):
        if change is not None and cycle == warm:
            judge_.change = change
        start = cycle * PER_SLOT % len(labels)
        picked = [labels[(start + i) % len(labels)] for i in range(PER_SLOT)]
        slots.append(summarise([(judge_.score(x), x) for x in picked], scales=scales,
                               score=score))
        window = slots[-window_slots:]
        finding = examine_drift(
            rule, current=Summary.of_values([v for a, _ in window for v in a]),
            bias=Summary.of_values([v for _, b in window for v in b]), baseline=baseline,
            confidence=0.95)
        (judgement,) = judge([(rule, finding)], false_discovery_rate=0.05)
        at = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=5 * cycle)
        step = advance(state, judgement.observation, policy=policy, at=at)
        state = step.state
        if "firing" in step.events and cycle >= warm:
            return cycle - warm + 1
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=40, help="steady days simulated")
    parser.add_argument("--runs", type=int, default=100, help="runs per change")
    parser.add_argument("--noise", type=float, default=0.1, help="judge noise (sd)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    print(f"setup: shipped judge_drift rules, {PER_SLOT} canaries per 5-minute slot, "
          f"judge noise sd {args.noise}, binary judge {BINARY_ACCURACY:.0%} right, "
          f"seed {args.seed}")
    for name, metric, score, changes in (
            ("rag_qa_judge_drift", "rag_qa", "faithfulness", (-0.1, -0.2, -0.3, 0.2)),
            ("bbh_judge_drift", "bbh_match", "correct", (0.2, 0.5, 1.0))):
        rule = shipped_rule(name)
        registry_metric = load_registry().get(metric)
        items, _ = load_gold(bundled_gold(metric), metric=registry_metric)
        labels = [item.labels[score] for item in items]
        scales = score_scales(registry_metric)
        binary = scales[score].kind == "binary"
        fired_days = sum(
            run(rule, labels, judge_=Judge(rng, binary=binary, noise=args.noise),
                scales=scales, score=score, change=None, cycles=CYCLES_PER_DAY) is not None
            for _ in range(args.days))
        print(f"{name}: steady judge, days with a firing: {fired_days} of {args.days}")
        for change in changes:
            delays = [run(rule, labels, judge_=Judge(rng, binary=binary, noise=args.noise),
                          scales=scales, score=score, change=change,
                          cycles=CYCLES_PER_DAY) for _ in range(args.runs)]
            caught = sorted(d for d in delays if d is not None)
            what = f"{change:.0%} of answers flipped" if binary else f"shift {change:+.1f}"
            if caught:
                p90 = caught[min(len(caught) - 1, int(0.9 * len(caught)))]
                print(f"  {what}: fired after a median {statistics.median(caught):.0f} "
                      f"cycles (p90 {p90}), never within a day in "
                      f"{len(delays) - len(caught)} of {args.runs} runs")
            else:
                print(f"  {what}: never fired within a day in {args.runs} runs")
    print(f"elapsed: {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
