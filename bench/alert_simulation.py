"""False alarms and detection delays of the two alert tests on the same simulated week.

Setup: three rules evaluated every minute for 7 simulated days, one per score kind (a
skewed continuous score, Beta(4, 1), mean 0.8; a yes/no score at 0.85; a 1-5 rubric
normalised to 0..1, mean 0.79), each over segments at 1, 10 and 100 judged samples a
minute (Poisson): ``--null`` steady segments per rate, and ``--runs`` segments per rate
and drop size with a drop of 3, 5 or 10 points planted at a known minute between day 2
and day 6 (a rubric's drop turns top answers into the worst). Every rule: window 10m,
trailing baseline 1d ending 10m before the window, ``min_samples`` 30, ``min_effect`` 0.05,
``mode: baseline``, recovery margin 0.02.

- fixed: the engine's fixed-sample tests (one-sided Welch t, two-proportion z,
  Mann-Whitney U with tie correction, here vectorised over segments with the formulas of
  ``evalfleet.alerts.statistic``; Fisher's exact test is left to the z-test) with
  Benjamini-Hochberg at 0.05 over every test of a cycle, all rules together, then the
  state machine at ``for: 1`` (recovery 1: every breach fires) and at the defaults
  ``for: 3``, recovery 3;
- sequential: the product's detector (``evalfleet.alerts.edetector``, run per segment
  and cycle as the engine runs it) at ``run_length: 30d``, K = the rule's segments;
  firing on an alarm, resolving on three clear windows, then starting again.

Baseline exclusions of firing periods are not simulated. Printed: false alarms per
segment-week on the steady segments, and the median and 90th percentile of the minutes
from a drop to its first firing (``-``: fewer than half, or 90%, fired within a day).

    python -m bench.alert_simulation                     # 30 steady, 8 drops per cell
    python -m bench.alert_simulation --null 5 --runs 3   # a quick look
    python -m bench.alert_simulation --null 1 --run-length 3 --per-segment
        # the sequential detector at about the fixed test's own rate of false alarms
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass

import numpy as np
from scipy import stats

from evalfleet.alerts.edetector import (
    DetectorState,
    alarm_level,
    baseline_reference,
    reset,
    update,
)
from evalfleet.alerts.statistic import Summary

KINDS = ("continuous", "binary", "ordinal")
RATES = (1, 10, 100)
DROPS = (0.03, 0.05, 0.10)
WEEK = 7 * 1440
#: Window, gap and baseline of every rule, in one-minute cycles.
WINDOW, GAP, BASELINE = 10, 10, 1440
MIN_SAMPLES, MIN_EFFECT, MARGIN, FDR = 30, 0.05, 0.02, 0.05
#: A drop counts as missed after this many cycles.
HORIZON = 1440
#: Normalised rubric values and shares before a drop.
RUBRIC = np.array([0.0, 0.25, 0.5, 0.75, 1.0])
RUBRIC_SHARES = np.array([0.02, 0.05, 0.13, 0.35, 0.45])


@dataclass(frozen=True)
class Stream:
    """One segment's per-cycle aggregates."""

    n: np.ndarray
    total: np.ndarray
    total_sq: np.ndarray
    levels: np.ndarray | None
    """Counts per value (cycles x values) for yes/no and rubric scores."""
    values: tuple[float, ...]
    """The values counted."""

    def summary(self, t: int) -> Summary:
        """Cycle ``t`` as the store summarises it."""
        levels = () if self.levels is None else tuple(
            (v, int(c)) for v, c in zip(self.values, self.levels[t], strict=True) if c)
        return Summary(n=int(self.n[t]), total=float(self.total[t]),
                       total_sq=float(self.total_sq[t]), levels=levels)


def segment_stream(kind: str, *, rate: float, cycles: int, seed: int, drop: float = 0.0,
                   start: int | None = None) -> Stream:
    """One segment: Poisson traffic at ``rate`` a cycle, the kind's score, its mean lower
    by ``drop`` from cycle ``start`` on."""
    rng = np.random.default_rng(seed)
    counts = rng.poisson(rate, cycles)
    lowered = np.where(np.arange(cycles) >= (cycles if start is None else start), drop, 0.0)
    if kind == "continuous":
        mean = np.repeat(0.8 - lowered, counts)
        values = rng.beta(5 * mean, 5 * (1 - mean))
        cycle = np.repeat(np.arange(cycles), counts)
        return Stream(counts, np.bincount(cycle, values, cycles),
                      np.bincount(cycle, values * values, cycles), None, ())
    if kind == "binary":
        ones = rng.binomial(counts, 0.85 - lowered)
        return Stream(counts, ones.astype(float), ones.astype(float),
                      np.stack([counts - ones, ones], axis=1), (0.0, 1.0))
    shares = np.tile(RUBRIC_SHARES, (cycles, 1))
    shares[:, 4] -= lowered
    shares[:, 0] += lowered
    levels = rng.multinomial(counts, shares)
    return Stream(counts, levels @ RUBRIC, levels @ RUBRIC**2, levels, tuple(RUBRIC))


@dataclass(frozen=True)
class Segment:
    """A simulated segment and what was planted in it."""

    kind: str
    rate: int
    drop: float
    start: int | None
    stream: Stream


def build_fleet(*, null: int, runs: int, seed: int) -> list[Segment]:
    """The steady and the dropping segments of every kind and rate."""
    fleet = []
    number = seed * 100_000
    for kind in KINDS:
        for rate in RATES:
            for _ in range(null):
                number += 1
                fleet.append(Segment(kind, rate, 0.0, None, segment_stream(
                    kind, rate=rate, cycles=WEEK, seed=number)))
            for drop in DROPS:
                for run in range(runs):
                    number += 1
                    start = 2 * 1440 + (run * 4 * 1440) // runs + number % 60
                    fleet.append(Segment(kind, rate, drop, start, segment_stream(
                        kind, rate=rate, cycles=WEEK, seed=number, drop=drop, start=start)))
    return fleet


def _running(values: np.ndarray) -> np.ndarray:
    return np.concatenate([np.zeros((1, *values.shape[1:])), np.cumsum(values, axis=0)])


def fixed_breaches(fleet: list[Segment]) -> tuple[np.ndarray, np.ndarray]:
    """Per cycle and segment: breach (after the cycle's Benjamini-Hochberg) and clear."""
    segments = len(fleet)
    sums = {name: np.stack([_running(getattr(s.stream, name)) for s in fleet], axis=1)
            for name in ("n", "total", "total_sq")}
    levels = {kind: np.stack([_running(s.stream.levels) for s in fleet if s.kind == kind],
                             axis=1) for kind in ("binary", "ordinal")}
    index = {kind: np.array([i for i, s in enumerate(fleet) if s.kind == kind])
             for kind in KINDS}
    breach = np.zeros((WEEK, segments), dtype=bool)
    clear = np.ones((WEEK, segments), dtype=bool)
    for t in range(WINDOW + GAP + MIN_SAMPLES, WEEK):
        w_end, w_start = t + 1, t + 1 - WINDOW
        b_end = w_start - GAP
        b_start = max(0, b_end - BASELINE)
        window = {k: v[w_end] - v[w_start] for k, v in sums.items()}
        base = {k: v[b_end] - v[b_start] for k, v in sums.items()}
        p_values = np.ones(segments)
        n1, n2 = window["n"], base["n"]
        ok = (n1 >= MIN_SAMPLES) & (n2 >= MIN_SAMPLES)
        with np.errstate(divide="ignore", invalid="ignore"):
            m1, m2 = window["total"] / n1, base["total"] / n2
            effect = m2 - m1
            for kind in KINDS:
                rows = index[kind]
                if kind == "continuous":
                    p_values[rows] = _welch(window, base, rows)
                else:
                    lv = levels[kind]
                    p_values[rows] = (_proportion(window, base, rows) if kind == "binary" else
                                      _mann_whitney(lv[w_end] - lv[w_start],
                                                    lv[b_end] - lv[b_start]))
        tested = np.flatnonzero(ok)
        if tested.size:
            q = stats.false_discovery_control(np.nan_to_num(p_values[tested], nan=1.0))
            breach[t, tested] = (q <= FDR) & (effect[tested] >= MIN_EFFECT)
        clear[t] = ok & (effect <= MIN_EFFECT - MARGIN)
    return breach, clear


def _welch(window: dict[str, np.ndarray], base: dict[str, np.ndarray],
           rows: np.ndarray) -> np.ndarray:
    n1, n2 = window["n"][rows], base["n"][rows]
    m1, m2 = window["total"][rows] / n1, base["total"][rows] / n2
    v1 = np.maximum(0, window["total_sq"][rows] - n1 * m1 * m1) / np.maximum(n1 - 1, 1)
    v2 = np.maximum(0, base["total_sq"][rows] - n2 * m2 * m2) / np.maximum(n2 - 1, 1)
    a, b = v1 / n1, v2 / n2
    df = (a + b) ** 2 / (a * a / np.maximum(n1 - 1, 1) + b * b / np.maximum(n2 - 1, 1))
    return np.asarray(stats.t.cdf((m1 - m2) / np.sqrt(a + b), df))


def _proportion(window: dict[str, np.ndarray], base: dict[str, np.ndarray],
                rows: np.ndarray) -> np.ndarray:
    x1, n1 = window["total"][rows], window["n"][rows]
    x2, n2 = base["total"][rows], base["n"][rows]
    pooled = (x1 + x2) / (n1 + n2)
    se = np.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    return np.asarray(stats.norm.cdf((x1 / n1 - x2 / n2) / se))


def _mann_whitney(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    tied = first + second
    below = np.cumsum(tied, axis=1) - tied
    n1, n2 = first.sum(axis=1), second.sum(axis=1)
    u = (first * (below + (tied + 1) / 2)).sum(axis=1) - n1 * (n1 + 1) / 2
    total = n1 + n2
    ties = (tied**3 - tied).sum(axis=1)
    variance = n1 * n2 / 12 * ((total + 1) - ties / (total * (total - 1)))
    return np.asarray(stats.norm.cdf((u - n1 * n2 / 2 + 0.5) / np.sqrt(variance)))


def fixed_firings(breach: np.ndarray, clear: np.ndarray, *, for_count: int,
                  recovery: int) -> list[list[int]]:
    """The cycles at which each segment starts firing, by the engine's state machine."""
    segments = breach.shape[1]
    firing = np.zeros(segments, dtype=bool)
    breaches = np.zeros(segments, dtype=int)
    clears = np.zeros(segments, dtype=int)
    fired: list[list[int]] = [[] for _ in range(segments)]
    for t in range(breach.shape[0]):
        b, c = breach[t], clear[t]
        clears = np.where(firing, np.where(c, clears + 1, 0), 0)
        resolved = firing & (clears >= recovery)
        breaches = np.where(~firing & b, breaches + 1, 0)
        fires = ~firing & (breaches >= for_count)
        for i in np.flatnonzero(fires):
            fired[i].append(t)
        firing = (firing & ~resolved) | fires
        breaches[fires] = 0
    return fired


def sequential_firings(segment: Segment, *, level: float, first_after: int | None) -> list[int]:
    """The cycles at which the product's detector fires on one segment (stopping at the
    first one from ``first_after`` on, when given)."""
    s = segment.stream
    running = np.cumsum(np.stack([np.concatenate([[0], a]) for a in (s.n, s.total, s.total_sq)],
                                 axis=1), axis=0)
    state, firing, clears, fired = DetectorState.start(0.0), False, 0, []
    for t in range(WEEK):
        b_end = t + 1 - WINDOW - GAP
        if b_end <= 0:
            continue
        n, total, total_sq = running[b_end] - running[max(0, b_end - BASELINE)]
        if n < MIN_SAMPLES:
            continue
        baseline = Summary(n=int(n), total=float(total), total_sq=float(total_sq))
        reference = baseline_reference(baseline, min_effect=MIN_EFFECT)
        state = update(state, s.summary(t), reference, cycle_start=60.0 * t,
                       cycle_end=60.0 * (t + 1))
        if not firing:
            if state.log_statistic >= math.log(level):
                fired.append(t)
                firing, clears = True, 0
                if first_after is not None and t >= first_after:
                    break
            continue
        wn, wt, _ = running[t + 1] - running[t + 1 - WINDOW]
        recovered = wn > 0 and baseline.mean - wt / wn <= MIN_EFFECT - MARGIN
        clears = clears + 1 if recovered else 0
        if clears >= 3:
            firing, state = False, reset(state)
    return fired


def _delays(fired: list[list[int]], fleet: list[Segment], kind: str, rate: int,
            drop: float) -> list[float]:
    delays = []
    for firings, segment in zip(fired, fleet, strict=True):
        if (segment.kind, segment.rate, segment.drop) != (kind, rate, drop):
            continue
        assert segment.start is not None
        after = [t - segment.start for t in firings if t >= segment.start]
        delays.append(after[0] if after and after[0] <= HORIZON else math.inf)
    return delays


def _quantile(delays: list[float], share: float) -> str:
    ordered = sorted(delays)
    value = ordered[min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1)]
    return "-" if math.isinf(value) else f"{value:.0f}"


def _false_alarms(fired: list[list[int]], fleet: list[Segment], kind: str, rate: int) -> float:
    null = [len(f) for f, s in zip(fired, fleet, strict=True)
            if (s.kind, s.rate, s.drop) == (kind, rate, 0.0)]
    return sum(null) / len(null)


def main() -> None:
    """Simulate, then print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--null", type=int, default=30, help="steady segments per kind and rate")
    parser.add_argument("--runs", type=int, default=8, help="segments per kind, rate and drop")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--run-length", type=float, default=30.0,
                        help="the sequential rule's run_length, in days")
    parser.add_argument("--per-segment", action="store_true",
                        help="the run length per segment (K = 1), no fleet budget")
    args = parser.parse_args()
    started = time.perf_counter()
    fleet = build_fleet(null=args.null, runs=args.runs, seed=args.seed)
    breach, clear = fixed_breaches(fleet)
    engines = {"fixed for 1": fixed_firings(breach, clear, for_count=1, recovery=1),
               "fixed for 3": fixed_firings(breach, clear, for_count=3, recovery=3)}
    per_rule = len(fleet) // len(KINDS)
    streams = 1 if args.per_segment else per_rule
    level = alarm_level(run_length_cycles=args.run_length * 1440, streams=streams)
    engines["sequential"] = [sequential_firings(s, level=level, first_after=s.start)
                             for s in fleet]
    print(f"{len(fleet)} segments ({per_rule} per rule), {WEEK} one-minute cycles, "
          f"sequential alarm level {level:.3g} ({args.run_length:g} days, K={streams}); "
          f"{time.perf_counter() - started:.0f} s")
    header = ["kind", "samples/min", "engine", "false alarms/segment-week",
              *(f"{round(d * 100)}-pt delay min (median / p90)" for d in DROPS)]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for kind in KINDS:
        for rate in RATES:
            for name, fired in engines.items():
                cells = [kind, str(rate), name, f"{_false_alarms(fired, fleet, kind, rate):.2f}"]
                for drop in DROPS:
                    delays = _delays(fired, fleet, kind, rate, drop)
                    cells.append(f"{_quantile(delays, 0.5)} / {_quantile(delays, 0.9)}")
                print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
