"""A simulated alert's window and baseline, corrected by labels: what the difference
estimator is checked against (``tests/evalfleet/core/test_estimator.py`` and
``bench/corrected_estimates.py``).

``n`` verdicts spread evenly over time 0..1. The window is [0.9, 1), the baseline
[0.6, 0.85). People's true score is Beta(5, 2) (mean 0.714); the judge adds 0.15 on 40%
of the traffic and 0.05 elsewhere, plus noise (sd 0.08), not clipped. Scenarios:

- ``people drop``: people's score is Beta(4, 2) in the window (a drop of 0.048), the
  judge's bias steady: the raw drop is real.
- ``judge drop``: people steady, the judge 0.1 harsher in the window: the raw drop of
  0.1 is the judge's alone.

Pools: ``own`` (each period's own labels, ``lam`` tuned) or ``shared`` (each pool reaches
0.5 back from its period's end: the window's [0.5, 1), the baseline's [0.35, 0.85), so
they share [0.5, 0.85), ``lam`` 1). The target is people's window mean minus their
baseline mean: of the distributions the verdicts are drawn from (-0.048 or 0), as the
estimator's variance treats verdicts as draws from them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evalfleet.alerts.judgecheck import decide
from evalfleet.core.estimator import (
    LabelledItem,
    Period,
    bias_difference,
    corrected_difference,
)
from evalfleet.core.sums import RunningSums

WINDOW = (0.9, 1.0)
BASELINE = (0.6, 0.85)
#: People's change in the ``people drop`` scenario: Beta(4, 2) against Beta(5, 2).
PEOPLE_DROP = 4 / 6 - 5 / 7
#: How far back a ``shared`` pool reaches from its period's end.
SHARED_POOL = 0.5


@dataclass(frozen=True)
class DropRun:
    """One simulated run."""

    target: float
    """People's change (window minus baseline), of the distributions."""
    raw: float
    """The judge's change."""
    low: float
    high: float
    """The corrected change's two-sided interval."""
    naive_low: float
    naive_high: float
    """The same without the covariance of shared labels."""
    bias_low: float
    bias_high: float
    """The judge's bias change's interval."""
    shared: int
    labels: tuple[int, int]
    verdict: str
    """What an alert on a decrease would say, at the interval's one-sided level."""

    @property
    def covered(self) -> bool:
        return self.low <= self.target <= self.high

    @property
    def naive_covered(self) -> bool:
        return self.naive_low <= self.target <= self.naive_high


def simulate_drop(rng: np.random.Generator, *, n: int, labels: int, scenario: str,
                  pools: str, confidence: float = 0.9) -> DropRun:
    """One run: a population, a uniform random slice of about ``labels`` items, and the
    corrected change's interval at ``confidence``."""
    t = np.sort(rng.random(n))
    in_window = t >= WINDOW[0]
    in_baseline = (t >= BASELINE[0]) & (t < BASELINE[1])
    truth = rng.beta(5, 2, n)
    if scenario == "people drop":
        truth = np.where(in_window, rng.beta(4, 2, n), truth)
    judge = truth + np.where(rng.random(n) < 0.4, 0.15, 0.05) + rng.normal(0, 0.08, n)
    if scenario == "judge drop":
        judge = np.where(in_window, judge - 0.1, judge)
    pi = labels / n
    labelled = rng.random(n) < pi
    periods = []
    for (start, end), member in ((WINDOW, in_window), (BASELINE, in_baseline)):
        reach = start if pools == "own" else end - SHARED_POOL
        pool = (t >= reach) & (t < end)
        chosen = np.flatnonzero(pool & labelled)
        periods.append(Period(
            window=_moments(judge[member]), pool=_moments(judge[pool]),
            labelled=[LabelledItem(judge=float(judge[i]), label=float(truth[i]),
                                   probability=pi, item=str(i)) for i in chosen],
            lam=None if pools == "own" else 1.0,
            # The baseline lies inside the window's shared pool; the window in no other.
            inside_other_pool=1.0 if pools == "shared" and end == BASELINE[1] else 0.0))
    change = corrected_difference(periods[0], periods[1], confidence=confidence)
    bias = bias_difference(periods[0], periods[1], confidence=confidence)
    naive = float(np.hypot(change.first.std_error, change.second.std_error))
    half = change.interval.high - change.interval.value
    z = half / change.std_error if change.std_error else 0.0
    return DropRun(
        target=PEOPLE_DROP if scenario == "people drop" else 0.0,
        raw=float(judge[in_window].mean() - judge[in_baseline].mean()),
        low=change.interval.low, high=change.interval.high,
        naive_low=change.interval.value - z * naive,
        naive_high=change.interval.value + z * naive,
        bias_low=bias.low, bias_high=bias.high, shared=change.shared,
        labels=(len(periods[0].labelled), len(periods[1].labelled)),
        verdict=decide(change.interval, bias, direction="decrease", pooled=pools == "shared"))


def _moments(values: np.ndarray) -> RunningSums:
    return RunningSums(n=len(values), total=float(values.sum()),
                   total_sq=float((values ** 2).sum()))
