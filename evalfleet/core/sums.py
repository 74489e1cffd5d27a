"""Running sums of one score: count, sum and sum of squares, and what they give. Pure.

Every mean and variance over verdicts is computed from these three numbers, whether a
database summed them (rollups, ``verdict_scores``) or Python did, and two disjoint sets
merge by adding them. The two variance conventions are named, because the callers need
different ones: the alert tests' t and Welch statistics estimate a population's
variance from a sample (``n - 1``, :attr:`RunningSums.sample_variance`); the corrected
estimates' plug-in moments are the sample's own (``n``,
:attr:`RunningSums.population_variance`). Each is computed exactly as its callers
always have, so no figure moves.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class RunningSums:
    """Count, sum and sum of squares of one score over some values."""

    n: int
    """Number of values."""
    total: float = 0.0
    """Their sum."""
    total_sq: float = 0.0
    """The sum of their squares."""

    @classmethod
    def of_values(cls, values: Iterable[float]) -> RunningSums:
        """The sums of raw values (tests and small inputs)."""
        items = [float(v) for v in values]
        return cls(n=len(items), total=sum(items), total_sq=sum(v * v for v in items))

    @property
    def mean(self) -> float:
        """The mean (NaN when empty)."""
        return self.total / self.n if self.n else math.nan

    @property
    def sample_variance(self) -> float:
        """The sample variance: ``n - 1`` in the denominator (0 for fewer than 2 values)."""
        if self.n < 2:
            return 0.0
        spread = self.total_sq - self.total * self.total / self.n
        return max(0.0, spread / (self.n - 1))

    @property
    def population_variance(self) -> float:
        """The population variance: ``n`` in the denominator (0 for fewer than 2 values)."""
        if self.n < 2:
            return 0.0
        return max(self.total_sq / self.n - self.mean ** 2, 0.0)

    def added(self, other: RunningSums) -> RunningSums:
        """The sums of both (disjoint) sets of values together."""
        return RunningSums(n=self.n + other.n, total=self.total + other.total,
                           total_sq=self.total_sq + other.total_sq)
