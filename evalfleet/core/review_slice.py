"""Which production verdicts go to people for review, and with what probability. Pure.

A verdict enters the random slice when a hash of its sample id, salted for review and
for its metric, falls below the rate of its stratum. The hash is its own (not the
producers' id hash, not another metric's), so the slice is independent of how the
sample was sampled upstream and of what was chosen for other metrics, and every
replica that stores a verdict of the same sample makes the same choice.

Strata split a metric's verdicts by the judge's score (the lowest normalised score
of the verdict) so low scores can be looked at more often: each stratum has a rate,
and the rate of the stratum a verdict fell in is its inclusion probability, recorded
with the item so estimates from the labels can weight it back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

#: 2**64, the size of the hash space a sample id is mapped into.
_HASH_SPACE = float(1 << 64)

#: The purpose the review hash is salted with.
REVIEW_SALT = "review"

#: Why an item is in the queue when a hash chose it; every other reason is a choice.
RANDOM_REASON = "random"


@dataclass(frozen=True, slots=True)
class Stratum:
    """Verdicts whose lowest normalised score is below ``below`` (and not below an
    earlier stratum's bound) are chosen at ``rate``."""

    below: float
    """Upper bound (exclusive) on the lowest normalised score, 0..1."""
    rate: float
    """Inclusion probability in this stratum, 0..1."""

    @property
    def name(self) -> str:
        """The label recorded with each item chosen in this stratum."""
        return f"below {self.below:g}"


@dataclass(frozen=True, slots=True)
class MetricSlice:
    """One metric's random slice: a base rate and optional strata by judge score."""

    rate: float
    """Inclusion probability of a verdict in no stratum, 0..1."""
    strata: tuple[Stratum, ...] = ()
    """Checked in order of their bounds, lowest first."""
    confidence_strata: tuple[Stratum, ...] = ()
    """By the verdict's confidence (a judge cascade's), checked before ``strata``, lowest
    bound first: more labels where the judges were unsure (uncertainty sampling)."""


@dataclass(frozen=True, slots=True)
class ReviewChoice:
    """A verdict the random slice chose."""

    probability: float
    """Its inclusion probability among all the metric's verdicts in its stratum."""
    stratum: str | None
    """The stratum's name, None for the base rate."""


@dataclass(frozen=True)
class ReviewSlice:
    """The random slice of every metric (metrics not named are not sampled)."""

    metrics: Mapping[str, MetricSlice] = field(default_factory=dict)
    labels_wanted: int = 1
    """Labels each item asks for."""
    expire_s: float = 14 * 86400.0
    """Seconds an item waits for its labels before it expires."""

    def choose(self, *, sample_id: str, metric: str, scores: Mapping[str, float | None],
               confidence: float | None = None) -> ReviewChoice | None:
        """Whether a production verdict enters the random slice.

        Args:
            sample_id: The verdict's sample.
            metric: The verdict's metric.
            scores: Its normalised scores (nulls ignored; none at all is the base rate).
            confidence: Its confidence (a judge cascade's verdict); None: unknown.

        Returns:
            The choice with its probability, or None when the verdict is not chosen.
        """
        spec = self.metrics.get(metric)
        if spec is None:
            return None
        rate, stratum = confidence_rate(spec, confidence) or stratum_rate(spec, scores)
        if review_fraction(sample_id=sample_id, metric=metric) >= rate:
            return None
        return ReviewChoice(probability=rate, stratum=stratum)


    def may_choose(self, *, sample_id: str, metric: str) -> bool:
        """Whether the slice could choose this sample's verdict, whatever its scores: a
        judge cascade judges such a sample with every tier before its scores are known.

        Args:
            sample_id: The sample.
            metric: The metric.

        Returns:
            True when the sample falls below the highest rate of the metric's strata.
        """
        spec = self.metrics.get(metric)
        if spec is None:
            return False
        highest = max([spec.rate, *(stratum.rate for stratum in spec.strata),
                       *(stratum.rate for stratum in spec.confidence_strata)])
        return review_fraction(sample_id=sample_id, metric=metric) < highest


def confidence_rate(spec: MetricSlice,
                    confidence: float | None) -> tuple[float, str] | None:
    """The rate and stratum name of a verdict's confidence band; None when no band holds
    it (or its confidence is unknown): the score strata and the base rate apply."""
    if confidence is None:
        return None
    for stratum in sorted(spec.confidence_strata, key=lambda s: s.below):
        if confidence < stratum.below:
            return stratum.rate, f"confidence below {stratum.below:g}"
    return None


def stratum_rate(spec: MetricSlice, scores: Mapping[str, float | None]) -> tuple[float, str | None]:
    """The rate and stratum name that apply to a verdict with these normalised scores."""
    values = [value for value in scores.values() if value is not None]
    if values:
        lowest = min(values)
        for stratum in sorted(spec.strata, key=lambda s: s.below):
            if lowest < stratum.below:
                return stratum.rate, stratum.name
    return spec.rate, None


def review_fraction(*, sample_id: str, metric: str) -> float:
    """Where a sample falls in [0, 1) for one metric's review slice, uniformly over ids."""
    return salted_fraction(REVIEW_SALT, metric=metric, sample_id=sample_id)


def salted_fraction(salt: str, *, metric: str, sample_id: str) -> float:
    """Where a sample falls in [0, 1) for one purpose (``salt``) and metric, uniformly over
    ids: choices made with different salts are independent of each other."""
    salted = "\x1f".join((salt, metric, sample_id)).encode("utf-8")
    digest = hashlib.blake2b(salted, digest_size=8).digest()
    return int.from_bytes(digest, "big") / _HASH_SPACE
