"""One simulated corrected estimate under a review slice design: what the intervals'
coverage is checked against (``tests/evalfleet/review/test_coverage.py`` and
``bench/review_coverage.py``).

A window of verdicts is drawn from a process: people's true score is Beta(2, 2.6) (mean
0.435), continuous, or yes/no (1 with that Beta draw's probability). The judge is biased:
continuous, it adds 0.15 on 40% of the traffic plus noise (sd 0.1), clipped to 0..1; yes/no,
it agrees with people 85% of the time. A pool of verdicts ends with the window (the pool
is the window, ``lam`` tuned; or longer, ``lam`` 1, the judge's bias steady over it). The
review slice draws each verdict of the pool on its own (as the slice's hash does) at its
stratum's rate: judge scores below 0.5 at one rate, the rest at another (equal rates: a
uniform slice), and every drawn item is labelled with the truth.

The estimand is the process's mean (what people would say of the traffic the window
samples), as the estimator's variance treats verdicts as draws from it; the window's own
mean over its verdicts is reported beside it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from evalfleet.core.estimator import (
    MIN_LABELS,
    MIN_STRATUM_LABELS,
    LabelledItem,
    StratumLabels,
    corrected_mean,
    lacking_labels,
    normal_interval,
    thinnest_df,
)
from evalfleet.core.sums import RunningSums

#: People's mean score in the process: Beta(2, 2.6).
PROCESS_MEAN = 2 / 4.6

#: Judge scores below this are the low stratum.
LOW_BELOW = 0.5


@dataclass(frozen=True)
class Design:
    """A slice design and the window it corrects."""

    name: str
    kind: str
    """``continuous`` or ``yes/no``."""
    window: int
    """Verdicts in the window."""
    pool: int
    """Verdicts in the label pool, the window's at its end (equal: the pool is the window)."""
    low_rate: float
    """Inclusion probability of judge scores below 0.5."""
    rest_rate: float
    """Inclusion probability of the rest (equal to ``low_rate``: a uniform slice)."""


@dataclass(frozen=True)
class Run:
    """One simulated estimate."""

    lacking: str | None
    """Why there is no corrected mean (None: there is one)."""
    labels: int
    thinnest: int
    """Labels in the stratum with the fewest."""
    held: bool
    """The interval held the process mean (False without 100 labels in all)."""
    held_window: bool
    """It held the window's own mean over its verdicts."""
    width: float
    lacking_overall: bool
    """Too few labels in all (the rule before the per-stratum minimum refused these only)."""
    held_normal: bool
    """The normal interval (no degrees of freedom) held the process mean: the interval
    before the per-stratum rule."""


def simulate(design: Design, rng: np.random.Generator, *, confidence: float = 0.9,
             min_labels: int = MIN_LABELS,
             min_stratum_labels: int = MIN_STRATUM_LABELS) -> Run:
    """One window, pool and slice of ``design``, and its corrected estimate."""
    truth, judge = _population(design, rng)
    low = judge < LOW_BELOW
    rates = np.where(low, design.low_rate, design.rest_rate)
    drawn = rng.random(design.pool) < rates
    labelled = [LabelledItem(judge=float(f), label=float(y), probability=float(p))
                for f, y, p in zip(judge[drawn], truth[drawn], rates[drawn], strict=True)]
    strata = _strata(design, low=low, drawn=drawn)
    lacking = lacking_labels(strata, min_labels=min_labels,
                             min_stratum_labels=min_stratum_labels)
    thinnest = min(s.labelled for s in strata)
    if len(labelled) < min_labels:
        return Run(lacking, len(labelled), thinnest, False, False, 0.0, True, False)
    # Estimated whether or not a stratum is short, so the rule without the per-stratum
    # minimum can be told apart.
    window = judge[design.pool - design.window:]
    corrected = corrected_mean(_moments(window), _moments(judge), labelled,
                               confidence=confidence, df=thinnest_df(strata),
                               lam=None if design.pool == design.window else 1.0)
    found = corrected.interval
    normal = normal_interval(found.value, corrected.std_error, confidence=confidence)
    own = float(truth[design.pool - design.window:].mean())
    return Run(lacking, len(labelled), thinnest, found.low <= PROCESS_MEAN <= found.high,
               found.low <= own <= found.high, found.high - found.low, False,
               normal.low <= PROCESS_MEAN <= normal.high)


def _population(design: Design, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    chance = rng.beta(2, 2.6, design.pool)
    if design.kind == "yes/no":
        truth = (rng.random(design.pool) < chance).astype(float)
        return truth, np.where(rng.random(design.pool) < 0.85, truth, 1.0 - truth)
    shift = np.where(rng.random(design.pool) < 0.4, 0.15, 0.0)
    return chance, np.clip(chance + shift + rng.normal(0, 0.1, design.pool), 0.0, 1.0)


def _strata(design: Design, *, low: np.ndarray, drawn: np.ndarray) -> list[StratumLabels]:
    if design.low_rate == design.rest_rate:
        return [StratumLabels(f"'rest' at rate {design.rest_rate:g}", int(drawn.sum()),
                              int(drawn.sum()))]
    counts = Counter(bool(b) for b in low[drawn])
    return [StratumLabels(f"'below {LOW_BELOW:g}' at rate {design.low_rate:g}", counts[True],
                          counts[True]),
            StratumLabels(f"'rest' at rate {design.rest_rate:g}", counts[False],
                          counts[False])]


def _moments(values: np.ndarray) -> RunningSums:
    return RunningSums(n=len(values), total=float(values.sum()),
                   total_sq=float((values ** 2).sum()))
