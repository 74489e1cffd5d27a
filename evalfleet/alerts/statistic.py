"""The tests behind every alert. Pure: plain numbers in, plain results out.

Each score kind gets the test that fits its distribution:

- continuous 0..1 scores: a one-sided Welch t-test against the baseline (unequal
  variances, from summary statistics), a one-sample t-test against a threshold;
- binary scores (a proportion): a one-sided two-proportion z-test against the
  baseline, Fisher's exact test when an expected cell count is under 5; against a
  threshold the score test that is dual to the Wilson interval, so it fires
  exactly when the Wilson bound is past the threshold;
- ordinal 1-5 scores: a one-sided Mann-Whitney U test (normal approximation with
  tie and continuity corrections, computed from the counts per level); against a
  threshold the one-sample t-test on the mean.

All p-values are one-sided, in the rule's bad direction, so a rise can never
breach a decrease rule. Effects are signed the same way: positive is worse.
Significance is decided later, with Benjamini-Hochberg over all tests of a cycle.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from scipy import stats

from evalfleet.core.sums import RunningSums

Direction = Literal["decrease", "increase"]

#: Fisher's exact test replaces the z-test when an expected cell count is below this.
FISHER_MIN_EXPECTED = 5.0


@dataclass(frozen=True)
class Summary(RunningSums):
    """The values of one score in one segment over one window, summarised: the running
    sums (count, sum, sum of squares) and what the ordinal and pinned tests need besides.

    Build with :meth:`of_values` or from SQL aggregates; two summaries of disjoint
    sample sets :meth:`merge`.
    """

    levels: tuple[tuple[float, int], ...] = ()
    """Count per distinct value, ascending (ordinal scores only)."""
    first_seen_ts: float | None = None
    """Earliest sample time, POSIX seconds (used to order pinned baseline values)."""

    @classmethod
    def of_values(cls, values: Iterable[float], *, with_levels: bool = False) -> Summary:
        """Summarise raw values (tests and small inputs)."""
        items = [float(v) for v in values]
        levels: dict[float, int] = {}
        if with_levels:
            for value in items:
                levels[value] = levels.get(value, 0) + 1
        return cls(n=len(items), total=sum(items), total_sq=sum(v * v for v in items),
                   levels=tuple(sorted(levels.items())))

    @property
    def variance(self) -> float:
        """The sample variance (``n - 1``), the convention of every test here."""
        return self.sample_variance

    def merge(self, other: Summary) -> Summary:
        """The summary of both sample sets together."""
        levels = dict(self.levels)
        for value, count in other.levels:
            levels[value] = levels.get(value, 0) + count
        firsts = [t for t in (self.first_seen_ts, other.first_seen_ts) if t is not None]
        return Summary(
            n=self.n + other.n, total=self.total + other.total,
            total_sq=self.total_sq + other.total_sq, levels=tuple(sorted(levels.items())),
            first_seen_ts=min(firsts) if firsts else None,
        )


@dataclass(frozen=True)
class TestResult:
    """One one-sided test of a segment's window."""

    against: Literal["threshold", "baseline", "bias_high", "bias_low"]
    """What the window was compared with: a threshold, or the baseline's mean (of the
    score, or for a judge_drift rule of its canary bias, in either direction)."""
    test: str
    """``welch_t``, ``two_proportion_z``, ``fisher_exact``, ``mann_whitney_u``,
    ``one_sample_t`` or ``wilson_score``."""
    p_value: float
    """One-sided, in the bad direction."""
    effect: float
    """Baseline: the change in mean in the bad direction. Threshold: how far the mean
    is past the threshold in the bad direction. Positive is worse."""
    statistic: float
    """The test statistic (t, z, U or the odds ratio)."""
    bound: float | None = None
    """Threshold tests: the confidence bound of the mean on the good side; the test is
    significant exactly when it lies past the threshold."""
    interval: tuple[float, float] | None = None
    """Binary scores: the Wilson interval of the window's proportion."""
    baseline_interval: tuple[float, float] | None = None
    """Binary scores against a baseline: the Wilson interval of the baseline's."""
    detail: dict[str, float] = field(default_factory=dict)
    """Anything else worth showing (degrees of freedom, probability of superiority)."""


def compare_with_baseline(
    kind: str, *, current: Summary, baseline: Summary, direction: Direction,
    confidence: float,
) -> TestResult:
    """Test whether ``current`` is worse than ``baseline``.

    Args:
        kind: ``continuous``, ``binary`` or ``ordinal``.
        current: The window.
        baseline: What it is compared with.
        direction: Which way is worse.
        confidence: Level of the intervals shown (e.g. 0.95).

    Returns:
        The test result; p-value and effect are one-sided in the bad direction.

    Raises:
        ValueError: For an unknown kind or an empty summary.
    """
    if current.n == 0 or baseline.n == 0:
        raise ValueError("both summaries need values")
    if kind == "continuous":
        return welch_t_test(current, baseline, direction=direction)
    if kind == "binary":
        return proportion_test(current, baseline, direction=direction, confidence=confidence)
    if kind == "ordinal":
        return mann_whitney_u_test(current, baseline, direction=direction)
    raise ValueError(f"unknown score kind {kind!r}")


def compare_with_threshold(
    kind: str, *, current: Summary, threshold: float, direction: Direction,
    confidence: float,
) -> TestResult:
    """Test whether the window's mean is past ``threshold`` in the bad direction.

    Args:
        kind: ``continuous``, ``binary`` or ``ordinal``.
        current: The window.
        threshold: The line, on the 0..1 scale.
        direction: Which way is worse.
        confidence: Level of the one-sided bound (e.g. 0.95).

    Returns:
        The test result with the confidence bound.

    Raises:
        ValueError: For an unknown kind or an empty summary.
    """
    if current.n == 0:
        raise ValueError("the summary needs values")
    if kind == "binary":
        return wilson_threshold_test(current, threshold=threshold, direction=direction,
                                     confidence=confidence)
    if kind in ("continuous", "ordinal"):
        return one_sample_t_test(current, threshold=threshold, direction=direction,
                                 confidence=confidence)
    raise ValueError(f"unknown score kind {kind!r}")


def welch_t_test(current: Summary, baseline: Summary, *, direction: Direction) -> TestResult:
    """One-sided Welch t-test of the means, from summary statistics."""
    effect = _worse_by(current.mean - baseline.mean, direction)
    alternative = "less" if direction == "decrease" else "greater"
    se = math.sqrt(current.variance / current.n + baseline.variance / baseline.n)
    if se == 0.0:
        # Both windows constant: any difference in the bad direction is certain.
        return TestResult("baseline", "welch_t", 0.0 if effect > 0 else 1.0, effect,
                          math.inf if effect > 0 else 0.0)
    result = stats.ttest_ind_from_stats(
        current.mean, math.sqrt(current.variance), current.n,
        baseline.mean, math.sqrt(baseline.variance), baseline.n,
        equal_var=False, alternative=alternative,
    )
    return TestResult("baseline", "welch_t", _finite_p(result.pvalue), effect,
                      float(result.statistic))


def proportion_test(
    current: Summary, baseline: Summary, *, direction: Direction, confidence: float,
) -> TestResult:
    """One-sided two-proportion z-test; Fisher's exact test when counts are small."""
    x1, n1 = round(current.total), current.n
    x2, n2 = round(baseline.total), baseline.n
    effect = _worse_by(x1 / n1 - x2 / n2, direction)
    interval = wilson_interval(x1, n1, confidence=confidence)
    baseline_interval = wilson_interval(x2, n2, confidence=confidence)
    pooled = (x1 + x2) / (n1 + n2)
    smallest_expected = min(n1, n2) * min(pooled, 1 - pooled)
    alternative = "less" if direction == "decrease" else "greater"
    if smallest_expected < FISHER_MIN_EXPECTED:
        odds, p_value = stats.fisher_exact([[x1, n1 - x1], [x2, n2 - x2]],
                                           alternative=alternative)
        return TestResult("baseline", "fisher_exact", _finite_p(p_value), effect,
                          float(odds), interval=interval, baseline_interval=baseline_interval)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    z = (x1 / n1 - x2 / n2) / se
    p_value = stats.norm.cdf(z) if direction == "decrease" else stats.norm.sf(z)
    return TestResult("baseline", "two_proportion_z", float(p_value), effect, z,
                      interval=interval, baseline_interval=baseline_interval)


def mann_whitney_u_test(current: Summary, baseline: Summary, *, direction: Direction) -> TestResult:
    """One-sided Mann-Whitney U test from counts per level.

    Equal to ``scipy.stats.mannwhitneyu(current, baseline, method="asymptotic")``
    on the expanded values, at a cost independent of the number of samples.
    """
    n1, n2 = current.n, baseline.n
    effect = _worse_by(current.mean - baseline.mean, direction)
    first, second = dict(current.levels), dict(baseline.levels)
    below = 0
    rank_sum = 0.0
    ties = 0.0
    for level in sorted(set(first) | set(second)):
        c1, c2 = first.get(level, 0), second.get(level, 0)
        tied = c1 + c2
        rank_sum += c1 * (below + (tied + 1) / 2)  # mid-rank of the tied block
        ties += tied**3 - tied
        below += tied
    u = rank_sum - n1 * (n1 + 1) / 2
    total = n1 + n2
    variance = n1 * n2 / 12 * ((total + 1) - ties / (total * (total - 1)))
    superiority = u / (n1 * n2)  # P(current > baseline) + P(tie) / 2
    detail = {"superiority": superiority}
    if variance <= 0:
        return TestResult("baseline", "mann_whitney_u", 1.0, effect, u, detail=detail)
    mean_u = n1 * n2 / 2
    if direction == "decrease":
        z = (u - mean_u + 0.5) / math.sqrt(variance)
        p_value = stats.norm.cdf(z)
    else:
        z = (u - mean_u - 0.5) / math.sqrt(variance)
        p_value = stats.norm.sf(z)
    return TestResult("baseline", "mann_whitney_u", float(p_value), effect, u, detail=detail)


def one_sample_t_test(
    current: Summary, *, threshold: float, direction: Direction, confidence: float,
) -> TestResult:
    """One-sided one-sample t-test of the mean against ``threshold``, with its bound."""
    n, mean = current.n, current.mean
    effect = _worse_by(mean - threshold, direction)
    se = math.sqrt(current.variance / n)
    critical = float(stats.t.ppf(confidence, df=n - 1))
    bound = mean + critical * se if direction == "decrease" else mean - critical * se
    if se == 0.0:
        return TestResult("threshold", "one_sample_t", 0.0 if effect > 0 else 1.0, effect,
                          math.inf if effect > 0 else 0.0, bound=bound)
    t = (mean - threshold) / se
    p_value = stats.t.cdf(t, df=n - 1) if direction == "decrease" else stats.t.sf(t, df=n - 1)
    return TestResult("threshold", "one_sample_t", float(p_value), effect, t, bound=bound,
                      detail={"df": n - 1})


def wilson_threshold_test(
    current: Summary, *, threshold: float, direction: Direction, confidence: float,
) -> TestResult:
    """One-sided score test of a proportion against ``threshold`` (dual to Wilson's interval)."""
    successes, n = round(current.total), current.n
    share = successes / n
    effect = _worse_by(share - threshold, direction)
    z = (share - threshold) / math.sqrt(threshold * (1 - threshold) / n)
    p_value = stats.norm.cdf(z) if direction == "decrease" else stats.norm.sf(z)
    # One-sided bound at `confidence` = one end of the two-sided interval at 2c - 1.
    low, high = wilson_interval(successes, n, confidence=2 * confidence - 1)
    return TestResult(
        "threshold", "wilson_score", float(p_value), effect, z,
        bound=high if direction == "decrease" else low,
        interval=wilson_interval(successes, n, confidence=confidence),
    )


def wilson_interval(successes: int, n: int, *, confidence: float) -> tuple[float, float]:
    """The two-sided Wilson score interval of a proportion.

    Args:
        successes: Count of ones.
        n: Count of values (at least 1).
        confidence: Coverage, e.g. 0.95.

    Returns:
        ``(low, high)`` within 0..1.
    """
    interval = stats.binomtest(successes, n).proportion_ci(confidence_level=confidence,
                                                            method="wilson")
    return float(interval.low), float(interval.high)


def benjamini_hochberg(p_values: Sequence[float], *, rate: float) -> list[bool]:
    """Which hypotheses are rejected at false discovery rate ``rate`` (Benjamini-Hochberg).

    Args:
        p_values: One per test, in any order.
        rate: The false discovery rate, e.g. 0.05.

    Returns:
        One flag per p-value, True where it is significant.
    """
    adjusted = adjust_p_values(p_values)
    return [q <= rate for q in adjusted]


def adjust_p_values(p_values: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (q-values), in the order given."""
    if not p_values:
        return []
    return [float(q) for q in stats.false_discovery_control(list(p_values), method="bh")]


def _worse_by(difference: float, direction: Direction) -> float:
    return -difference if direction == "decrease" else difference


def _finite_p(p_value: float) -> float:
    return 1.0 if math.isnan(p_value) else min(1.0, max(0.0, float(p_value)))
