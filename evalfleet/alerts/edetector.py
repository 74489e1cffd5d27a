"""A sequential drop detector per rule and segment, whose false alarms are bounded over
time. Pure: plain numbers in, plain state out.

**What it tests.** Scores are read on a scale where lower is worse (an ``increase`` rule's
values x become 1 - x) and lie in 0..1 (a 1-5 rubric is stored as (s - 1) / 4, a yes/no
score as 0 or 1). Before each cycle a *boundary* b is fixed: the baseline's mean less its
one-sided bound (:func:`baseline_reference`), or a rule's threshold
(:func:`threshold_reference`). The null hypothesis is "every sample of this cycle has a
mean of at least b". A bet of size λ on one sample x pays ``1 + λ (b - x)``: under the null
its expectation is at most 1, so the product of the payoffs is a nonnegative
supermartingale (a betting e-process, Waudby-Smith and Ramdas 2023), and a drop makes it
grow at about ``δ² / (2 σ²)`` per sample for a drop δ.

**The e-detector.** Each of a small fixed grid of bets (multiples of the bet that grows
fastest for a drop of the rule's ``min_effect``, fixed from the baseline before the cycle)
runs a CUSUM of its e-process: ``M_t = max(M_{t-1}, 1) · L_t``, ``L_t`` the cycle's product
of payoffs. The detector's statistic is the mean of the grid's ``M``; it alarms at
:func:`alarm_level`. Each CUSUM is at most the Shiryaev-Roberts sum of e-processes started
at every cycle (``R_t = L_t (R_{t-1} + 1)``), whose null mean grows by at most one a cycle,
so the mean of the grid is dominated by an e-detector (Shin, Ramdas and Rinaldo,
"E-detectors"): under the null its average run length to a false alarm is at least the
alarm level, counted in cycles (a cycle without samples counts too, and changes nothing).

**Per-cycle aggregates, never history.** A cycle's payoffs need only its own samples'
aggregates (:class:`~evalfleet.alerts.statistic.Summary`): for yes/no and rubric scores
the count per value gives the exact ``sum of log(1 + λ (b - x))``; for a continuous score
the count, sum and sum of squares give the least value it could have, which keeps the
guarantee (it is below the exact e-process). With ``u = λ (b - x) >= -c``, ``c = λ (1 - b)``,
the quadratic through ``log(1 + u)`` at ``-c`` and tangent to it at any ``v`` lies below
it for every ``u >= -c`` (its difference from the logarithm has a convex derivative with
zeros only between ``-c`` and ``v`` and at ``v``); taking ``v`` where the two-point samples
at ``-c`` and ``v`` with the cycle's moments sit makes it exact for those. The older
bound, tangent at ``v = 0``, gave up about a third of the growth on a skewed score.

**Drops against the baseline from before them.** A bet fixes its boundary and size when
its CUSUM restarts and keeps them while it grows: the e-process started at a cycle uses
the reference fixed before that cycle, as every e-process of the Shiryaev-Roberts sum
below may, and a drop is not hidden by a trailing baseline that has since taken it in.
The boundary it keeps is never more than :data:`HELD_ALLOWANCE` of ``min_effect`` above
the cycle's own, so one fixed on a baseline that ran high (30 yes/no samples early on)
cannot stay too high for days. The null hypothesis reads: no sample's mean is below the
boundary its bet holds (for a steady score, the cycle's own or a little above it).

**Many streams.** With K streams (rule, segment and test) alarming at ``K · R`` each, the
first alarm of any of them comes after at least R cycles on average: the sum of their
Shiryaev-Roberts statistics grows by at most K a cycle and is at least ``K · R`` at an
alarm. K is the most streams that can be watched at once (the rule's ``max_segments``
times its tests), so segments that appear later need no new budget.

**The baseline's own error** enters through its lower bound: b is the lower end of a
one-sided confidence sequence for the baseline's mean (:func:`baseline_radius`), so the
chance that b is above the true mean at *any* size the baseline reaches is at most
:data:`BASELINE_ALPHA`, not at each size separately as a fixed normal bound would give.
The guarantee then reads: with probability at least ``1 - BASELINE_ALPHA`` the boundary
never exceeds the pre-change mean, and on that event the run length is as stated. The
sequence is the normal mixture on the baseline's own standard deviation (an asymptotic
confidence sequence, Waudby-Smith, Arnold, Wu, Howard and Ramdas, "Time-uniform central
limit theory and asymptotic confidence sequences", AoS 2024): it needs only the count,
sum and sum of squares, and adapts to the score's spread (see docs/alerts.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from evalfleet.alerts.statistic import Direction, Summary

#: Multiples of the bet tuned to ``min_effect``: one grid, fixed for every cycle, so a
#: drop larger or smaller than the design size is still met by a bet near its best.
BET_MULTIPLIERS = (0.5, 1.0, 2.0, 4.0, 8.0)

#: Largest bet as a share of the one that could lose everything on a single sample
#: (``1 / (1 - b)``): a payoff is never below one half.
BET_CAP = 0.5

#: Chance that the boundary is above the baseline's true mean at any size the baseline
#: reaches (the confidence sequence's error).
BASELINE_ALPHA = 0.05

#: Baseline size (samples) at which its confidence sequence is tightest: about a day of
#: a segment's judged traffic at one sample a minute.
BASELINE_TUNED_N = 1000

#: How far above the cycle's own boundary a growing bet may keep the one it restarted
#: on, as a share of ``min_effect``: a trailing baseline that takes in a drop is held
#: off until it has fallen this far, and a boundary fixed on a baseline that ran high
#: (a small one, early on) can never be more than this too high: every bet of the grid
#: then still loses on a steady score (to second order).
HELD_ALLOWANCE = 0.25

#: Normal-mixture tuning of the drop's confidence sequence: tightest near this many samples.
_CS_TUNED_N = 100

#: The sub-Gaussian scale of a score in 0..1.
_SCORE_SCALE = 0.5


@dataclass(frozen=True)
class Reference:
    """What one cycle's samples are compared with, fixed before the cycle."""

    boundary: float
    """The null hypothesis: every sample's mean is at least this (lower is worse)."""
    mean: float
    """The baseline's mean (the threshold itself for a threshold test)."""
    half_width: float
    """``mean - boundary``: the baseline's one-sided bound (0 for a threshold)."""
    bets: tuple[float, ...]
    """One bet size per entry of :data:`BET_MULTIPLIERS`."""
    allowance: float = 0.0
    """How far above this boundary a bet may keep the one it restarted on."""


@dataclass(frozen=True)
class BetState:
    """One bet's CUSUM and the samples since it last restarted."""

    log_value: float = 0.0
    """``log M`` (0 at start: ``M = 1`` and ``max(M, 1)`` restart alike)."""
    started_at: float | None = None
    """POSIX start of the cycle it last restarted in: the estimated change start."""
    n: int = 0
    """Samples since then."""
    total: float = 0.0
    """Their sum (on the lower-is-worse scale)."""
    boundary: float | None = None
    """The boundary fixed when it last restarted, kept until it restarts again (None:
    the cycle's own)."""
    mean: float | None = None
    """The baseline's mean then."""
    size: float | None = None
    """Its bet then."""

    def to_json(self) -> list[Any]:
        """Plain JSON data."""
        return [self.log_value, self.started_at, self.n, self.total, self.boundary,
                self.mean, self.size]

    @classmethod
    def from_json(cls, data: Any) -> BetState:
        """The state :meth:`to_json` stored (also the older four numbers, without the
        fixed reference).

        Raises:
            ValueError: ``data`` is not one.
        """
        value, started, n, total, *fixed = data
        if fixed and len(fixed) != 3:
            raise ValueError("a bet's state holds 4 or 7 numbers")
        boundary, mean, size = (None if v is None else float(v) for v in fixed or (None,) * 3)
        return cls(float(value), None if started is None else float(started), int(n),
                   float(total), boundary, mean, size)


@dataclass(frozen=True)
class DetectorState:
    """One stream's detector: its bets, and up to when it has read samples."""

    bets: tuple[BetState, ...]
    """One per entry of :data:`BET_MULTIPLIERS`."""
    read_until: float
    """POSIX time up to which samples were read (the next cycle reads from here)."""
    updates: int = 0
    """Cycles read."""

    @classmethod
    def start(cls, at: float) -> DetectorState:
        """A detector that has seen nothing, reading from ``at`` on."""
        return cls(bets=tuple(BetState() for _ in BET_MULTIPLIERS), read_until=at)

    @property
    def log_statistic(self) -> float:
        """``log`` of the mean of the bets' CUSUMs: the e-detector's statistic."""
        return _log_mean_exp([bet.log_value for bet in self.bets])

    def to_json(self) -> dict[str, Any]:
        """Plain JSON data, for the store."""
        return {"read_until": self.read_until, "updates": self.updates,
                "bets": [bet.to_json() for bet in self.bets]}

    @classmethod
    def from_json(cls, data: Any) -> DetectorState | None:
        """The state stored by :meth:`to_json`; None when it is not one (the detector then
        starts again: a lost state delays an alarm, never causes one)."""
        try:
            bets = tuple(BetState.from_json(bet) for bet in data["bets"])
            state = cls(bets=bets, read_until=float(data["read_until"]),
                        updates=int(data["updates"]))
        except (KeyError, TypeError, ValueError):
            return None
        numbers = [state.read_until, *(v for b in bets for v in (
            b.log_value, b.total, b.boundary or 0.0, b.mean or 0.0, b.size or 0.0))]
        if len(bets) != len(BET_MULTIPLIERS) or not all(map(math.isfinite, numbers)):
            return None
        return state


@dataclass(frozen=True)
class Evidence:
    """What a detector says about a stream, for people."""

    e_value: float
    """The statistic (mean of the bets' CUSUMs); it alarms at the alarm level."""
    alarm_level: float
    """Where it alarms."""
    drop: float | None
    """Estimated drop of the mean since the change start (positive is worse)."""
    drop_interval: tuple[float, float] | None
    """Anytime-valid interval of that drop (the baseline's bound included)."""
    change_started_at: float | None
    """POSIX time the change is estimated to have started (None: no sign of one)."""
    samples_since_change: int
    """Samples read since then."""


def oriented(summary: Summary, direction: Direction) -> Summary:
    """``summary`` on the lower-is-worse scale: an ``increase`` rule's values x as 1 - x."""
    if direction == "decrease":
        return summary
    return Summary(n=summary.n, total=summary.n - summary.total,
                   total_sq=summary.n - 2 * summary.total + summary.total_sq,
                   levels=tuple(sorted((1.0 - v, c) for v, c in summary.levels)),
                   first_seen_ts=summary.first_seen_ts)


def growth_bets(*, boundary: float, min_effect: float, variance: float) -> tuple[float, ...]:
    """The grid of bet sizes for one cycle.

    Args:
        boundary: The null boundary b.
        min_effect: The drop the bets are tuned to.
        variance: The score's variance before the change (the baseline's).

    Returns:
        One bet per multiplier; all zero when no drop below b is possible (b <= 0).
    """
    if boundary <= 0.0:
        return tuple(0.0 for _ in BET_MULTIPLIERS)
    effect = max(min_effect, 1e-3)
    # Kelly for small bets: the expected payoff over its second moment after the drop.
    tuned = effect / (max(variance, 0.0) + effect * effect)
    return tuple(_capped(m * tuned, boundary) for m in BET_MULTIPLIERS)


def baseline_radius(n: float, *, variance: float, alpha: float = BASELINE_ALPHA) -> float:
    """How far below a baseline's mean its one-sided confidence sequence ends.

    Args:
        n: The baseline's samples.
        variance: Their variance (floored at ``1 / n``: a baseline of equal values
            still has an unknown spread).
        alpha: Chance the true mean lies below the bound at any ``n`` at once.

    Returns:
        The radius; ``inf`` for no samples.
    """
    if n <= 0:
        return math.inf
    scale = math.sqrt(max(variance, 1.0 / n))
    return _mixture_radius(n, scale=scale, alpha=alpha, tuned_n=BASELINE_TUNED_N)


def baseline_reference(baseline: Summary, *, min_effect: float,
                       alpha: float = BASELINE_ALPHA) -> Reference:
    """The reference of a baseline test, from the baseline's summary (oriented).

    Args:
        baseline: The baseline's values on the lower-is-worse scale (at least 2).
        min_effect: The drop the bets are tuned to.
        alpha: Error of the baseline's confidence sequence (:func:`baseline_radius`).

    Returns:
        The boundary (mean less its bound), the mean and the bets.
    """
    half = baseline_radius(baseline.n, variance=baseline.variance, alpha=alpha)
    mean = baseline.mean
    boundary = mean - half
    return Reference(boundary=boundary, mean=mean, half_width=half,
                     bets=growth_bets(boundary=boundary, min_effect=min_effect,
                                      variance=baseline.variance),
                     allowance=HELD_ALLOWANCE * min_effect)


def threshold_reference(threshold: float, *, min_effect: float, variance: float) -> Reference:
    """The reference of a threshold test (oriented): the threshold is known exactly.

    Args:
        threshold: The line, on the lower-is-worse scale.
        min_effect: The drop below it the bets are tuned to.
        variance: The score's variance (the window's, or 1/4 when unknown).

    Returns:
        The reference.
    """
    return Reference(boundary=threshold, mean=threshold, half_width=0.0,
                     bets=growth_bets(boundary=threshold, min_effect=min_effect,
                                      variance=variance))


def log_payoff(increment: Summary, *, boundary: float, bet: float) -> float:
    """``log`` of one cycle's product of payoffs ``1 + bet (b - x)`` (or a lower bound).

    Args:
        increment: The cycle's samples, oriented; levels when the values are few.
        boundary: The null boundary b.
        bet: The bet size (at most ``BET_CAP / (1 - b)``).

    Returns:
        Exact from the counts per value; from count, sum and sum of squares the least
        value any samples with those sums in 0..1 could give (see the module docstring).
        0 for no samples or no bet.
    """
    if increment.n == 0 or bet <= 0.0:
        return 0.0
    if increment.levels:
        return sum(count * math.log1p(bet * (boundary - value))
                   for value, count in increment.levels)
    n, total, total_sq = increment.n, increment.total, increment.total_sq
    # The payoffs' u = bet (b - x): their mean and mean square, and their floor -c (x = 1).
    mean = bet * (boundary - total / n)
    square = max(mean * mean, bet * bet * (boundary * boundary - 2 * boundary * total / n
                                           + total_sq / n))
    c = bet * max(0.0, 1.0 - boundary)
    if mean + c <= 1e-12:  # every sample at x = 1: each pays 1 - c exactly
        return n * math.log1p(-c)
    # The two-point samples at -c and v with these moments pay the least.
    v = (square + c * mean) / (mean + c)
    return n * _quadratic_floor(mean, square, c=c, v=v)


def _quadratic_floor(mean: float, square: float, *, c: float, v: float) -> float:
    """Mean of ``q(u)``, the quadratic through ``log(1 + u)`` at ``-c`` and tangent to it
    at ``v``: ``q <= log(1 + u)`` for every ``u >= -c``, so its mean bounds the payoffs'."""
    gap = c + v
    if gap <= 1e-9:
        return math.log1p(mean) if mean > -1.0 else -math.inf
    curvature = (math.log1p(v) - math.log1p(-c) - gap / (1.0 + v)) / (gap * gap)
    return (math.log1p(v) + (mean - v) / (1.0 + v)
            - curvature * (square - 2 * v * mean + v * v))


def update(state: DetectorState, increment: Summary, reference: Reference, *,
           cycle_start: float, cycle_end: float) -> DetectorState:
    """The detector after one cycle.

    A bet that restarts here fixes this cycle's boundary and bet, and keeps them until it
    restarts again: a drop is measured against the baseline as it was when the drop
    began, not against a trailing baseline that the drop has since lowered.

    Args:
        state: Before the cycle.
        increment: The cycle's new samples (read from ``state.read_until``), oriented.
        reference: The boundary and bets, fixed before the cycle.
        cycle_start: POSIX start of the samples read (the estimated change start if a bet
            restarts here).
        cycle_end: POSIX end of the samples read.

    Returns:
        The new state.
    """
    bets = []
    for bet, size in zip(state.bets, reference.bets, strict=True):
        growing = bet.log_value > 0.0
        if growing and bet.boundary is not None and bet.size is not None:
            boundary, mean, chosen = bet.boundary, bet.mean, bet.size
        else:  # (re)started, or stored without a reference: this cycle's
            boundary, mean, chosen = reference.boundary, reference.mean, size
        held = _held(boundary, reference)
        # Capped again at the held boundary: a lower one lets a sample lose more.
        gain = log_payoff(increment, boundary=held, bet=_capped(chosen, held))
        if growing:
            bets.append(BetState(bet.log_value + gain, bet.started_at, bet.n + increment.n,
                                 bet.total + increment.total, boundary, mean, chosen))
        else:  # max(M, 1): the CUSUM starts again here
            bets.append(BetState(gain, cycle_start, increment.n, increment.total, boundary,
                                 mean, chosen))
    return DetectorState(bets=tuple(bets), read_until=cycle_end, updates=state.updates + 1)


def _capped(bet: float, boundary: float) -> float:
    """``bet`` at most :data:`BET_CAP` of the one that could lose everything at ``b``."""
    return min(bet, BET_CAP / (1.0 - boundary)) if boundary < 1.0 else bet


def _held(boundary: float, reference: Reference) -> float:
    """The boundary a bet tests: the one it restarted on, at most the cycle's own plus
    its allowance."""
    return min(boundary, reference.boundary + reference.allowance)


def reset(state: DetectorState) -> DetectorState:
    """The detector after an alarm was handled (resolved): every CUSUM starts again."""
    return replace(state, bets=tuple(BetState() for _ in state.bets))


def alarm_level(*, run_length_cycles: float, streams: int) -> float:
    """Where one stream's statistic alarms so that K streams together wait at least
    ``run_length_cycles`` on average before their first false alarm.

    Args:
        run_length_cycles: The stated average run length, in cycles.
        streams: K, the most streams watched at once.

    Returns:
        The alarm level ``K · R`` (at least 1).
    """
    return max(1.0, float(streams) * run_length_cycles)


def evidence(state: DetectorState, reference: Reference | None, *,
             level: float, confidence: float) -> Evidence:
    """The detector's evidence: its statistic, and the drop since the estimated start.

    Args:
        state: The detector.
        reference: The last cycle's reference (None: no drop estimate).
        level: The alarm level.
        confidence: Coverage of the drop's anytime-valid interval.

    Returns:
        The evidence; the change start and drop come from the bet with the largest
        CUSUM, when it is above 1.
    """
    best = max(state.bets, key=lambda bet: bet.log_value)
    e_value = math.exp(min(state.log_statistic, 700.0))
    if reference is None or best.log_value <= 0.0 or best.n == 0:
        return Evidence(e_value, level, None, None, None, 0)
    # The drop from the baseline as it was when the strongest bet last restarted.
    if best.boundary is None or best.mean is None:
        held, half = reference.boundary, reference.half_width
    else:
        held, half = _held(best.boundary, reference), best.mean - best.boundary
    baseline = held + half
    width = _mean_radius(best.n, alpha=1 - confidence)
    drop = baseline - best.total / best.n
    interval = (drop - width - half, drop + width + half)
    return Evidence(e_value, level, drop, interval, best.started_at, best.n)


def evidence_details(found: Evidence) -> dict[str, Any]:
    """The evidence as plain JSON data (stored with the state, shown and notified)."""
    return {
        "e_value": _finite(found.e_value), "alarm_level": _finite(found.alarm_level),
        "drop": found.drop,
        "drop_interval": list(found.drop_interval) if found.drop_interval else None,
        "change_started_at": found.change_started_at,
        "samples_since_change": found.samples_since_change,
    }


def detection_cycles(*, drop: float, mean: float, variance: float, samples_per_cycle: float,
                     level: float, min_effect: float, half_width: float = 0.0) -> float:
    """About how many cycles a sustained drop takes to alarm (for planning).

    Args:
        drop: The drop below the baseline's mean.
        mean: The baseline's mean (oriented).
        variance: The score's variance.
        samples_per_cycle: Samples a cycle.
        level: The alarm level.
        min_effect: The drop the bets are tuned to.
        half_width: The baseline's bound (the boundary's distance below its mean).

    Returns:
        Cycles until the best bet of the grid crosses ``level``; ``inf`` when no bet grows.
    """
    past = drop - half_width
    if past <= 0 or samples_per_cycle <= 0:
        return math.inf
    rates = []
    for size in growth_bets(boundary=mean - half_width, min_effect=min_effect,
                            variance=variance):
        # Expected log payoff per sample, to second order: λδ - λ²(σ² + δ²)/2.
        rates.append(size * past - size * size * (variance + past * past) / 2)
    rate = max(rates) * samples_per_cycle
    # The grid's mean is at least its best member over the grid's size.
    needed = math.log(level) + math.log(len(BET_MULTIPLIERS))
    return needed / rate if rate > 0 else math.inf


def fleet_streams(*, segments: int, tests: int) -> int:
    """K: the streams that may be watched at once (segments times tests, at least 1)."""
    return max(1, segments) * max(1, tests)


def _mean_radius(n: int, *, alpha: float) -> float:
    """Half-width of a two-sided normal-mixture confidence sequence for a mean of values
    in 0..1 (sub-Gaussian with scale 1/2; Howard et al. 2021), valid at every n at once."""
    return _mixture_radius(n, scale=_SCORE_SCALE, alpha=alpha / 2, tuned_n=_CS_TUNED_N)


def _mixture_radius(n: float, *, scale: float, alpha: float, tuned_n: int) -> float:
    """One side of the normal-mixture confidence sequence for a mean of ``n`` samples of
    spread ``scale``, tightest near ``tuned_n``, valid at every ``n`` at once."""
    variance = scale**2 * n
    rho = scale**2 * tuned_n
    boundary = math.sqrt(2 * (variance + rho)
                         * math.log(math.sqrt((variance + rho) / rho) / alpha))
    return boundary / n


def _log_mean_exp(values: Sequence[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values) / len(values))


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None

