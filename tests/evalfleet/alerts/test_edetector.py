"""The sequential detector: its payoffs, its state, and seeded week-long simulations of
null segments (false alarms within the guarantee) and planted drops (detected)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.alert_simulation import RUBRIC, RUBRIC_SHARES, segment_stream
from evalfleet.alerts.edetector import (
    BET_MULTIPLIERS,
    DetectorState,
    alarm_level,
    baseline_reference,
    detection_cycles,
    evidence,
    log_payoff,
    oriented,
    reset,
    threshold_reference,
    update,
)
from evalfleet.alerts.statistic import Summary

#: One simulated week of one-minute cycles.
WEEK = 7 * 24 * 60
#: The engine's trailing baseline, in cycles: one day, ending a window and a gap back.
BASELINE, BASELINE_END = 24 * 60, 20


def simulate(kind: str, *, rate: float, cycles: int, seed: int, drop: float = 0.0,
             start: int | None = None) -> list[Summary]:
    """One segment's per-cycle summaries (the bench's streams: a skewed continuous score,
    a yes/no score, a rubric), the mean lowered by ``drop`` from cycle ``start`` on."""
    stream = segment_stream(kind, rate=rate, cycles=cycles, seed=seed, drop=drop, start=start)
    return [stream.summary(t) for t in range(cycles)]


def watch(cycles: list[Summary], *, levels: list[float], min_effect: float = 0.05,
          first_only: bool = False) -> list[list[int]]:
    """Cycles at which a detector over these summaries alarms (started again after each),
    one detector per level, against the engine's trailing baseline of the same segment.
    One pass for every level: the baseline and its reference are the same for each (half
    the CPU of a null week's two levels went to them and to this loop)."""
    running = np.cumsum([[0, 0, 0]] + [[c.n, c.total, c.total_sq] for c in cycles],
                        axis=0).tolist()
    states = [DetectorState.start(0.0) for _ in levels]
    alarms: list[list[int]] = [[] for _ in levels]
    logs = [math.log(level) for level in levels]
    for t, increment in enumerate(cycles):
        end = t - BASELINE_END
        (n1, total1, sq1), (n0, total0, sq0) = running[max(end, 0)], running[max(end - BASELINE, 0)]
        if n1 - n0 < 30:
            continue
        reference = baseline_reference(Summary(n=int(n1 - n0), total=total1 - total0,
                                               total_sq=sq1 - sq0), min_effect=min_effect)
        for i, state in enumerate(states):
            if first_only and alarms[i]:
                continue
            state = update(state, increment, reference, cycle_start=60.0 * t,
                           cycle_end=60.0 * (t + 1))
            if state.log_statistic >= logs[i]:
                alarms[i].append(t)
                state = reset(state)
            states[i] = state
        if first_only and all(alarms):
            break
    return alarms


KINDS = ["continuous", "binary", "ordinal"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("rate", [1, 10, 100])
def test_a_null_week_stays_within_the_run_length(kind: str, rate: int) -> None:
    # A run length of 500 cycles allows about 20 false alarms in a week; at 300 segments
    # and 30 days (the level of a real fleet) none at all is expected.
    cycles = simulate(kind, rate=rate, cycles=WEEK, seed=rate)
    week, month = watch(cycles, levels=[alarm_level(run_length_cycles=500, streams=1),
                                        alarm_level(run_length_cycles=30 * 24 * 60,
                                                    streams=300)])
    assert len(week) <= WEEK / 500
    assert month == []


@pytest.mark.parametrize("kind,rate,drop,within", [
    ("continuous", 100, 0.03, 60), ("continuous", 100, 0.05, 15), ("continuous", 10, 0.05, 180),
    ("continuous", 10, 0.10, 60), ("binary", 100, 0.03, 180), ("binary", 100, 0.05, 60),
    ("binary", 10, 0.10, 120), ("ordinal", 100, 0.03, 60), ("ordinal", 100, 0.05, 30),
    ("ordinal", 10, 0.10, 120),
])
def test_a_planted_drop_is_detected(kind: str, rate: int, drop: float, within: int) -> None:
    start = 2 * 24 * 60
    cycles = simulate(kind, rate=rate, cycles=start + 24 * 60, seed=7, drop=drop, start=start)
    level = alarm_level(run_length_cycles=30 * 24 * 60, streams=300)
    [alarms] = watch(cycles, levels=[level], first_only=True)
    assert alarms and start <= alarms[0] < start + within


def test_exact_payoffs_from_counts_and_a_bound_from_sums() -> None:
    values = [0.1, 0.5, 0.9, 1.0, 0.3]
    exact = sum(math.log1p(0.8 * (0.7 - v)) for v in values)
    with_levels = Summary.of_values(values, with_levels=True)
    assert log_payoff(with_levels, boundary=0.7, bet=0.8) == pytest.approx(exact)
    bound = log_payoff(Summary.of_values(values), boundary=0.7, bet=0.8)
    assert exact - 0.1 < bound <= exact
    assert log_payoff(Summary(n=0), boundary=0.7, bet=0.8) == 0.0


def test_bets_never_risk_more_than_half_and_none_when_no_drop_is_possible() -> None:
    reference = baseline_reference(Summary.of_values([0.99, 1.0] * 500), min_effect=0.05)
    assert len(reference.bets) == len(BET_MULTIPLIERS)
    assert all(bet * (1 - reference.boundary) <= 0.5 + 1e-12 for bet in reference.bets)
    assert threshold_reference(0.0, min_effect=0.05, variance=0.1).bets == (0.0,) * len(
        BET_MULTIPLIERS)


def test_an_increase_rule_reads_values_upside_down() -> None:
    summary = oriented(Summary.of_values([0.2, 0.4], with_levels=True), "increase")
    assert summary.total == pytest.approx(1.4)
    assert summary.total_sq == pytest.approx(0.64 + 0.36)
    assert summary.levels == ((0.6, 1), (0.8, 1))


def test_evidence_estimates_the_drop_and_its_start() -> None:
    cycles = simulate("continuous", rate=100, cycles=3 * 24 * 60, seed=3, drop=0.1,
                      start=2 * 24 * 60)
    state = DetectorState.start(0.0)
    baseline = Summary.of_values([0.8 - 0.2, 0.8 + 0.2] * 2000)
    reference = baseline_reference(baseline, min_effect=0.05)
    for t, increment in enumerate(cycles[: 2 * 24 * 60 + 30]):
        state = update(state, increment, reference, cycle_start=60.0 * t,
                       cycle_end=60.0 * (t + 1))
    found = evidence(state, reference, level=1e6, confidence=0.95)
    assert found.e_value > 1e6
    assert found.drop is not None and found.drop_interval is not None
    assert found.drop_interval[0] < 0.1 < found.drop_interval[1]
    assert found.change_started_at is not None
    assert abs(found.change_started_at - 60.0 * 2 * 24 * 60) <= 60.0 * 10


@pytest.mark.parametrize("seed", range(6))
def test_the_bound_from_sums_never_exceeds_the_exact_payoff(seed: int) -> None:
    # The two-point bound is the least any samples in 0..1 with these sums could pay:
    # never above the exact product, and at least the older tangent-at-zero bound.
    rng = np.random.default_rng(seed)
    for _ in range(200):
        values = rng.beta(*rng.uniform(0.3, 6, 2), size=int(rng.integers(1, 60)))
        if rng.random() < 0.2:
            values[: len(values) // 2] = 1.0
        boundary, bet = rng.uniform(0.05, 0.99), rng.uniform(0.01, 1.0)
        bet *= 0.5 / (1 - boundary)
        exact = float(np.sum(np.log1p(bet * (boundary - values))))
        bound = log_payoff(Summary.of_values(values.tolist()), boundary=boundary, bet=bet)
        u, c = bet * (boundary - values), bet * (1 - boundary)
        tangent = float(u.sum() - (-math.log1p(-c) - c) / c**2 * (u * u).sum())
        assert tangent - 1e-9 <= bound <= exact + 1e-9


def test_a_drop_is_measured_against_the_baseline_from_before_it() -> None:
    # The trailing baseline takes in a little of the drop; a bet that started on the old
    # one keeps it.
    before = baseline_reference(Summary.of_values([0.7, 0.9] * 500), min_effect=0.05)
    lowered = baseline_reference(Summary.of_values([0.69, 0.89] * 500), min_effect=0.05)
    drop = Summary.of_values([0.6, 0.8] * 20)
    state = update(DetectorState.start(0.0), drop, before, cycle_start=0.0, cycle_end=60.0)
    state = update(state, drop, lowered, cycle_start=60.0, cycle_end=120.0)
    fresh = update(DetectorState.start(0.0), drop, lowered, cycle_start=0.0, cycle_end=60.0)
    assert all(bet.boundary == before.boundary for bet in state.bets if bet.log_value > 0)
    assert state.log_statistic > 2 * fresh.log_statistic
    found = evidence(state, lowered, level=1e6, confidence=0.95)
    assert found.drop == pytest.approx(0.1)
    assert found.change_started_at == 0.0


def test_a_boundary_kept_from_a_high_baseline_is_held_near_the_cycles_own() -> None:
    # Fixed on a baseline that ran 0.1 high: held at most min_effect / 4 above the
    # cycle's own boundary, so steady scores at the true mean make it lose.
    high = baseline_reference(Summary.of_values([0.8, 1.0] * 500), min_effect=0.05)
    true = baseline_reference(Summary.of_values([0.7, 0.9] * 500), min_effect=0.05)
    state = update(DetectorState.start(0.0), Summary.of_values([0.75] * 10), high,
                   cycle_start=0.0, cycle_end=60.0)
    assert state.log_statistic > 0
    for t in range(1, 200):
        state = update(state, Summary.of_values([0.7, 0.9] * 5), true, cycle_start=60.0 * t,
                       cycle_end=60.0 * (t + 1))
    assert state.log_statistic < 0
    assert true.allowance == pytest.approx(0.0125)


@pytest.mark.parametrize("with_levels", [True, False])
def test_a_large_bet_kept_from_a_high_boundary_is_capped_at_the_held_one(
    with_levels: bool,
) -> None:
    # A bet sized for a boundary of 0.98 (up to 25) would lose everything on a sample
    # at 1 against a held boundary of 0.85; capped again, it loses at most half.
    high = baseline_reference(Summary.of_values([0.97, 0.99] * 500), min_effect=0.05)
    low = baseline_reference(Summary.of_values([0.75, 0.95] * 500), min_effect=0.05)
    state = update(DetectorState.start(0.0), Summary.of_values([0.9] * 5), high,
                   cycle_start=0.0, cycle_end=60.0)
    assert max(bet.size or 0.0 for bet in state.bets) * (1 - low.boundary) > 1
    ones = Summary.of_values([1.0] * 3, with_levels=with_levels)
    later = update(state, ones, low, cycle_start=60.0, cycle_end=120.0)
    assert all(math.isfinite(bet.log_value) for bet in later.bets)
    assert min(b.log_value - a.log_value for a, b in zip(state.bets, later.bets,
                                                         strict=True)) >= 3 * math.log(0.5)


def test_a_state_stored_before_the_fixed_reference_still_loads() -> None:
    older = {"read_until": 60.0, "updates": 1,
             "bets": [[1.5, 0.0, 40, 28.0]] * len(BET_MULTIPLIERS)}
    state = DetectorState.from_json(older)
    assert state is not None and state.bets[0].boundary is None
    reference = baseline_reference(Summary.of_values([0.7, 0.9] * 500), min_effect=0.05)
    later = update(state, Summary.of_values([0.6] * 10), reference, cycle_start=60.0,
                   cycle_end=120.0)
    assert later.bets[0].boundary == reference.boundary and later.bets[0].n == 50


@pytest.mark.parametrize("stored", [
    None, {}, {"bets": "x", "read_until": 0, "updates": 0},
    {"bets": [[0, None, 0, 0]], "read_until": 0, "updates": 0},            # wrong grid
    {"bets": [[float("nan"), None, 0, 0]] * len(BET_MULTIPLIERS), "read_until": 0,
     "updates": 0},
    {"bets": [[0, None, 0, 0]] * len(BET_MULTIPLIERS), "read_until": "soon", "updates": 0},
    {"bets": [[0, None, 0, 0, 0.7]] * len(BET_MULTIPLIERS), "read_until": 0, "updates": 0},
    {"bets": [[0, None, 0, 0, float("inf"), 0.8, 1.0]] * len(BET_MULTIPLIERS),
     "read_until": 0, "updates": 0},
])
def test_a_damaged_stored_state_starts_again(stored: object) -> None:
    assert DetectorState.from_json(stored) is None


def test_a_state_survives_its_json() -> None:
    state = update(DetectorState.start(0.0), Summary.of_values([0.2] * 40),
                   baseline_reference(Summary.of_values([0.7, 0.9] * 500), min_effect=0.05),
                   cycle_start=0.0, cycle_end=60.0)
    assert DetectorState.from_json(state.to_json()) == state


def test_planning_figures_grow_with_the_level_and_shrink_with_traffic() -> None:
    common = {"drop": 0.05, "mean": 0.8, "variance": 0.03, "min_effect": 0.05}
    slow = detection_cycles(samples_per_cycle=10, level=1e7, **common)
    assert detection_cycles(samples_per_cycle=100, level=1e7, **common) < slow
    assert detection_cycles(samples_per_cycle=10, level=1e3, **common) < slow
    assert math.isinf(detection_cycles(samples_per_cycle=10, level=1e7, half_width=0.06,
                                       **common))


def _draws(kind: str, rng: np.random.Generator, size: tuple[int, int]) -> np.ndarray:
    """Samples of the bench's three score shapes (Beta(4, 1) skewed continuous, yes/no at
    0.85, the rubric's shares)."""
    if kind == "continuous":
        return rng.beta(4.0, 1.0, size)
    if kind == "binary":
        return (rng.random(size) < 0.85).astype(float)
    return rng.choice(RUBRIC, size=size, p=RUBRIC_SHARES)


TRUE_MEANS = {"continuous": 0.8, "binary": 0.85, "ordinal": float(RUBRIC @ RUBRIC_SHARES)}


@pytest.mark.parametrize("kind", KINDS)
def test_the_baseline_boundary_stays_below_the_true_mean_at_every_size(kind: str) -> None:
    # The guarantee needs the boundary at or below the pre-change mean. The baseline's
    # confidence sequence bounds the chance that it ever rises above it, over every size
    # the baseline reaches at once, by BASELINE_ALPHA (5%); a fixed bound of 2.33 standard
    # errors, right 99% of the time at each size, is wrong at some size far more often.
    runs, sizes = 400, np.unique(np.geomspace(30, 20_000, 120).astype(int))
    values = _draws(kind, np.random.default_rng(7), (runs, int(sizes[-1])))
    sums, squares = np.cumsum(values, axis=1), np.cumsum(values * values, axis=1)
    crossed_sequence = crossed_fixed = 0
    for run in range(runs):
        sequence = fixed = False
        for n in sizes:
            baseline = Summary(n=int(n), total=float(sums[run, n - 1]),
                               total_sq=float(squares[run, n - 1]))
            boundary = baseline_reference(baseline, min_effect=0.05).boundary
            sequence |= boundary > TRUE_MEANS[kind]
            fixed |= baseline.mean - 2.33 * math.sqrt(baseline.variance / n) > TRUE_MEANS[kind]
        crossed_sequence += sequence
        crossed_fixed += fixed
    # 3 to 8 of 400 (seed 7); 5% of 400 is 20, and a binomial at 5% stays under 32 with
    # probability 0.998.
    assert crossed_sequence <= 32, crossed_sequence
    assert crossed_fixed > 40, crossed_fixed  # 81 to 105 of 400 (seed 7)
