"""Judge-corrected means with valid intervals: prediction-powered inference on a random slice. Pure.

The judge scores every verdict; people label a probability subsample of the same verdicts
(the review queue's random items, each with its inclusion probability ``pi``). For the
judge's scores ``f`` and people's labels ``y`` (both normalised to 0..1), the corrected mean
of a window ``W`` is the inverse-probability-weighted prediction-powered estimator of
active statistical inference (Zrnic and Candès, ICML 2024) with PPI++ power tuning
(Angelopoulos, Duchi and Zrnic, 2023)::

    theta = lam * mean_W(f) + wmean_L(y - lam * f)

The first term is the judge's mean over every verdict of the window; the second, the
correction, is the mean of ``y - lam * f`` over the labelled items of a pool ``L`` of
``N_L`` verdicts, each weighted by ``1/pi`` (and divided by the sum of those weights, the
Hajek form: dividing by ``N_L`` instead, the paper's Horvitz-Thompson form, is as
unbiased but its variance grows with the square of the judge's bias, a third wider
interval at a bias of 0.1 in the tests). The pool contains the window and is usually
longer (labels arrive hours after verdicts, and a few hours hold too few). Pooling assumes
the judge's error ``y - f`` (``lam`` is then 1, see below) has the same mean over ``L`` as
over ``W``: the judge's bias is steady over the pool. With ``L = W`` and one ``pi`` for all
it is PPI++.

Variance (the verdicts as independent draws, each labelled with probability ``pi`` on its
own), linearised: with ``d_i = xi_i (r_i - wmean(r)) / pi_i`` for ``r = y - lam f``
(``xi_i`` = 1 when labelled, ``d_i`` = 0 otherwise),

    Var(theta) = lam^2 Var(f)/N_W + Var(d)/N_L + 2 lam Cov(f, d)/N_L

(the last term because the window's verdicts are also in the pool). Every moment is a
plug-in over the pool; ``Var(f)`` is over the window. The interval is the normal one,
valid for large samples.

Power tuning: when the pool is the window, ``lam`` minimises this variance (a quadratic in
``lam``), clipped to [0, 1]: 0 ignores the judge (the weighted mean of the labels alone),
1 is the plain correction. When the pool is longer, ``lam`` must be 1: the correction then
estimates the pool's mean of ``y - lam f``, which is the window's only if ``y - lam f`` is
steady; for ``lam`` = 1 that is the judge's bias, the stated assumption, but for
``lam`` < 1 it would also need people's own mean to be steady, the very thing the window
is measuring (a tuned ``lam`` of 0.6 turned a true drop of 0.048 into 0.029 in a check).
Callers pass ``lam=1.0`` for a pooled window (:mod:`evalfleet.review.estimate` does).

Why not ``ppi_py``: its ``ppi_mean_ci(..., w=, w_unlabeled=)`` weights a labelled and a
separate unlabelled sample for a weighted-mean target (covariate shift); it has no
inclusion indicator over one population, so it does not compute this estimator. With one
probability ``pi = n/N`` for everyone, ``lam = 1`` and ``L = W`` the two point estimates
coincide (the tests check it, and that the intervals agree within a few percent).
Written here with the standard library only (sums and ``statistics.NormalDist``): small,
and nothing heavy for the processes that show it.

The difference of two periods (an alert's window and its baseline), each corrected by the
labels of its own pool: ``Delta = theta_1 - theta_2``. The pools may overlap (a pool
longer than the gap between the periods' ends), and a label in both weighs in both
corrections, so

    Var(Delta) = Var(theta_1) + Var(theta_2) - 2 Cov(theta_1, theta_2)
    Cov(theta_1, theta_2) = sum over shared labels of d1_i d2_i
                            + lam_1 s_1 Cov(f, d2)/N_2 + lam_2 s_2 Cov(f, d1)/N_1

with ``dP_i = w_i (r_i - wmean(r)) / N_P`` each label's influence on pool P's correction
(``r = y - lam_P f``, ``w = 1/pi`` with the pool's own non-response adjustment), and
``s_P`` the share of period P's verdicts inside the other pool (the judge's mean of one
period moves with the other's correction through them). The periods' own verdicts are
disjoint. A sum of products of influence terms (the sandwich form of the linearised
estimator) rather than a paired bootstrap over labels: it is the same linearisation the
single-period variance already uses, it costs one pass over the labels where a bootstrap
costs hundreds, and it gives the same answer at every page view and notification (a
bootstrap's interval moves with its random draws). ``bench/corrected_estimates.py``
checks its coverage by simulation. :func:`bias_difference` is the same for the judge's
bias (``f - y``) alone: how much the judge's error moved between the two pools.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

from evalfleet.core.errors import NotRandomSample
from evalfleet.core.sums import RunningSums

#: Labelled random items below which no corrected mean is given ("not enough labels"): the
#: normal interval is a large-sample one; in bench/corrected_estimates.py a 90% interval
#: held the true mean in 82% to 87% of simulated runs at 50 labels, 87% to 93% from 100 on.
MIN_LABELS = 100

#: Labelled random items each stratum of the pool needs besides: a stratum sampled at a
#: low rate weighs each of its labels heavily, and with few of them the interval's
#: variance is read from a handful of points and comes out short (a stratum at 0.06 with
#: 10 to 19 labels held 80% at 90%; from 30 on, 89% to 91%: bench/review_coverage.py).
MIN_STRATUM_LABELS = 30

#: Default coverage of the intervals.
CONFIDENCE = 0.95

#: What ``lam`` is, in the words shown wherever it is (pages, review status, estimate).
LAM_MEANING = ("lam is how much each correction leans on the judge's scores (PPI++): 0 "
               "uses people's labels alone, 1 the judge's mean corrected by its measured "
               "error, chosen per period for the narrowest interval")


@dataclass(frozen=True, slots=True)
class LabelledItem:
    """One labelled random item of the pool."""

    judge: float
    """The judge's normalised score."""
    label: float
    """People's normalised value."""
    probability: float
    """Its inclusion probability (0 < p <= 1)."""
    reason: str = "random"
    """Why it was queued: only ``random`` items can be used."""
    item: str = ""
    """What names it in an error (the sample id)."""


@dataclass(frozen=True, slots=True)
class StratumLabels:
    """One stratum of a pool (a stratum name and the rate it was sampled at): its random
    items and how many of them are labelled."""

    name: str
    labelled: int
    random: int


def lacking_labels(strata: Sequence[StratumLabels], *, min_labels: int = MIN_LABELS,
                   min_stratum_labels: int = MIN_STRATUM_LABELS) -> str | None:
    """What keeps a pool's labels from a corrected mean, said for people, or None.

    Args:
        strata: The pool's strata (a uniform slice has one).
        min_labels: Fewest labelled random items in all.
        min_stratum_labels: Fewest in each stratum that has random items.

    Returns:
        ``"64 of 100 labels"``, ``"stratum 'rest' at rate 0.06 has 12 of 30 labels"``
        (the thinnest first), both joined by ``"; "``, or None when there are enough.
    """
    total = sum(stratum.labelled for stratum in strata)
    lacking = [f"{total} of {min_labels} labels"] if total < min_labels else []
    lacking += [f"stratum {stratum.name} has {stratum.labelled} of {min_stratum_labels} labels"
                for stratum in sorted(strata, key=lambda found: (found.labelled, found.name))
                if stratum.random and stratum.labelled < min_stratum_labels][:2]
    return "; ".join(lacking) or None


def thinnest_df(strata: Sequence[StratumLabels]) -> float | None:
    """Degrees of freedom of a pool's corrected interval: its thinnest stratum's labels
    minus one (None without labels)."""
    counts = [stratum.labelled for stratum in strata if stratum.labelled]
    return max(min(counts) - 1, 1) if counts else None


@dataclass(frozen=True, slots=True)
class Interval:
    """A mean with its two-sided interval."""

    value: float
    low: float
    high: float


@dataclass(frozen=True, slots=True)
class Corrected:
    """A corrected mean, how it was tuned, and its standard error."""

    interval: Interval
    lam: float
    """The power-tuning weight of the judge (0..1)."""
    std_error: float


def check_random(items: Sequence[LabelledItem]) -> None:
    """Refuse items that were not drawn at random with a known probability.

    Raises:
        NotRandomSample: An item was chosen (an alert's evidence, a filter...) or has no
            usable probability; it names the item.
    """
    for item in items:
        if item.reason != "random":
            raise NotRandomSample(f"{item.item or 'an item'} was queued as {item.reason!r}, "
                                  "not at random: it cannot weigh in an estimate",
                                  item=item.item)
        if not 0.0 < item.probability <= 1.0:
            raise NotRandomSample(f"{item.item or 'an item'} has inclusion probability "
                                  f"{item.probability!r}, not in (0, 1]", item=item.item)


def normal_interval(value: float, std_error: float, *, confidence: float,
                    df: float | None = None) -> Interval:
    """``value`` plus or minus the normal quantile (Student's t with ``df`` degrees of
    freedom, when given) times ``std_error``."""
    level = 0.5 + confidence / 2
    quantile = NormalDist().inv_cdf(level) if df is None else t_quantile(level, df)
    half = quantile * std_error
    return Interval(value=value, low=value - half, high=value + half)


def t_quantile(level: float, df: float) -> float:
    """Student's t quantile at ``level`` with ``df`` degrees of freedom, by the
    Cornish-Fisher expansion around the normal one (Abramowitz and Stegun 26.7.5):
    within 0.004 of the exact value from 5 degrees of freedom on and 0.0001 from 10
    (levels up to 0.995); corrected intervals use 29 or more.

    Raises:
        ValueError: ``df`` below 1.
    """
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, not {df!r}")
    z = NormalDist().inv_cdf(level)
    terms = ((z ** 3 + z) / 4,
             (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96,
             (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384,
             (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / 92160)
    return z + math.fsum(term / df ** (power + 1) for power, term in enumerate(terms))


def raw_mean(window: RunningSums, *, confidence: float = CONFIDENCE) -> Interval:
    """The judge's mean over the window with its normal interval (for the judge's mean,
    not for what people would say).

    Raises:
        ValueError: The window has no verdicts.
    """
    if window.n == 0:
        raise ValueError("no verdicts in the window")
    return normal_interval(window.mean, math.sqrt(window.population_variance / window.n),
                           confidence=confidence)


def corrected_mean(window: RunningSums, pool: RunningSums, labelled: Sequence[LabelledItem], *,
                   confidence: float = CONFIDENCE, lam: float | None = None,
                   df: float | None = None) -> Corrected:
    """The prediction-powered mean of the window (see the module's formula).

    Args:
        window: The judge's scores over the window's verdicts.
        pool: The judge's scores over the pool's verdicts (the window's among them).
        labelled: The pool's labelled random items.
        confidence: Coverage of the interval.
        lam: A fixed weight of the judge; None tunes it.
        df: Degrees of freedom of a Student's t interval (None: normal). Callers pass
            the labels of the pool's thinnest stratum minus one: the lower bound of
            Satterthwaite's degrees of freedom for a sum of per-stratum variances, so a
            heavy stratum with few labels widens the interval as it should.

    Returns:
        The corrected mean, its interval, ``lam`` and the standard error.

    Raises:
        NotRandomSample: An item was not drawn at random.
        ValueError: No verdicts, no labels, or a pool smaller than the window or than its
            labels.
    """
    check_random(labelled)
    if window.n == 0 or not labelled or pool.n < max(window.n, len(labelled)):
        raise ValueError("need verdicts in the window, labels, and a pool holding both")
    m = _PoolMoments.of(pool, labelled)
    if lam is None:
        lam = m.tuned_lam(window)
    value = lam * window.mean + m.y_mean - lam * m.f_labelled
    var_d = m.var_e - 2 * lam * m.cov_eg + lam ** 2 * m.var_g
    cov_fd = m.cov_fe - lam * m.cov_fg
    variance = (lam ** 2 * window.population_variance / window.n + var_d / pool.n
                + 2 * lam * cov_fd / pool.n)
    std_error = math.sqrt(max(variance, 0.0))
    return Corrected(interval=normal_interval(value, std_error, confidence=confidence, df=df),
                     lam=lam, std_error=std_error)


@dataclass(frozen=True, slots=True)
class _PoolMoments:
    """Plug-in moments over the pool of ``f`` (every verdict), ``e = xi (y - y_mean) / pi``
    and ``g = xi (f - f_labelled) / pi`` (zero where unlabelled)."""

    n: int
    y_mean: float
    """People's weighted mean over the labelled items."""
    f_labelled: float
    """The judge's weighted mean over the same items."""
    e_mean: float
    g_mean: float
    var_e: float
    var_g: float
    cov_eg: float
    cov_fe: float
    cov_fg: float

    @classmethod
    def of(cls, pool: RunningSums, labelled: Sequence[LabelledItem]) -> _PoolMoments:
        n = pool.n
        inv = [1.0 / item.probability for item in labelled]
        weight = math.fsum(inv)
        y_mean = math.fsum(i.label * w for i, w in zip(labelled, inv, strict=True)) / weight
        f_labelled = math.fsum(i.judge * w for i, w in zip(labelled, inv, strict=True)) / weight
        # Centred on the labelled items' weighted means: the correction's linearisation.
        ys = [(item.label - y_mean) * w for item, w in zip(labelled, inv, strict=True)]
        gs = [(item.judge - f_labelled) * w for item, w in zip(labelled, inv, strict=True)]
        fs = [item.judge for item in labelled]

        def mean(values: Iterable[float]) -> float:
            return math.fsum(values) / n

        e_mean, g_mean = mean(ys), mean(gs)
        return cls(
            n=n, y_mean=y_mean, f_labelled=f_labelled, e_mean=e_mean, g_mean=g_mean,
            var_e=mean(e * e for e in ys) - e_mean ** 2,
            var_g=mean(g * g for g in gs) - g_mean ** 2,
            cov_eg=mean(e * g for e, g in zip(ys, gs, strict=True)) - e_mean * g_mean,
            cov_fe=mean(f * e for f, e in zip(fs, ys, strict=True)) - pool.mean * e_mean,
            cov_fg=mean(f * g for f, g in zip(fs, gs, strict=True)) - pool.mean * g_mean,
        )

    def tuned_lam(self, window: RunningSums) -> float:
        """The ``lam`` of least variance, clipped to [0, 1] (1 when the judge's scores
        do not vary)."""
        a = (window.population_variance / window.n + self.var_g / self.n
             - 2 * self.cov_fg / self.n)
        b = self.cov_eg / self.n - self.cov_fe / self.n
        if a <= 0.0:
            return 1.0
        return min(max(b / a, 0.0), 1.0)


@dataclass(frozen=True, slots=True)
class Period:
    """One period of a difference: its verdicts, the pool that corrects it, its labels."""

    window: RunningSums
    """The judge's scores over the period's verdicts."""
    pool: RunningSums
    """The judge's scores over the pool's verdicts (the period's among them)."""
    labelled: Sequence[LabelledItem]
    """The pool's labelled random items, each named (``item``) so that an item in both
    pools is known as one."""
    lam: float | None = None
    """A fixed weight of the judge; None tunes it (only for a pool that is the period)."""
    inside_other_pool: float = 0.0
    """Share (0..1) of the period's verdicts that are also in the other period's pool."""


@dataclass(frozen=True, slots=True)
class Difference:
    """``theta_1 - theta_2`` of two corrected periods, with its interval."""

    interval: Interval
    first: Corrected
    second: Corrected
    std_error: float
    covariance: float
    """``Cov(theta_1, theta_2)``: what the shared labels (and verdicts) make them share."""
    shared: int
    """Labelled items in both pools."""


def corrected_difference(first: Period, second: Period, *,
                         confidence: float = CONFIDENCE) -> Difference:
    """The difference of two corrected means whose pools may share labels (see the
    module's formula).

    Args:
        first: The period subtracted from (an alert's window).
        second: The period subtracted (its baseline).
        confidence: Coverage of the two-sided interval.

    Returns:
        The difference, both corrected means, the standard error and the covariance.

    Raises:
        NotRandomSample: An item was not drawn at random.
        ValueError: A period without verdicts or labels, or a pool smaller than either.
    """
    found = [corrected_mean(p.window, p.pool, p.labelled, confidence=confidence, lam=p.lam)
             for p in (first, second)]
    one, two = (_influences(p, c.lam) for p, c in zip((first, second), found, strict=True))
    shared = one.keys() & two.keys()
    covariance = math.fsum(one[i] * two[i] for i in shared)
    for period, own, other in ((first, found[0], (second, found[1])),
                               (second, found[1], (first, found[0]))):
        if period.inside_other_pool:
            covariance += own.lam * period.inside_other_pool * _judge_covariance(*other)
    variance = found[0].std_error ** 2 + found[1].std_error ** 2 - 2 * covariance
    std_error = math.sqrt(max(variance, 0.0))
    value = found[0].interval.value - found[1].interval.value
    return Difference(interval=normal_interval(value, std_error, confidence=confidence),
                      first=found[0], second=found[1], std_error=std_error,
                      covariance=covariance, shared=len(shared))


def bias_difference(first: Period, second: Period, *,
                    confidence: float = CONFIDENCE) -> Interval:
    """How much the judge's bias (its score minus people's, weighted) differs between the
    two pools, with its interval; shared labels counted once in each (see the module).

    Raises:
        NotRandomSample: An item was not drawn at random.
        ValueError: A pool without labels.
    """
    bias, influence = [], []
    for period in (first, second):
        check_random(period.labelled)
        if not period.labelled:
            raise ValueError("need labels in both pools")
        fixed = _influences(period, 1.0)
        weights = [1.0 / i.probability for i in period.labelled]
        bias.append(-math.fsum(w * (i.label - i.judge) for i, w in
                               zip(period.labelled, weights, strict=True)) / math.fsum(weights))
        # The influence of y - f, negated: that of f - y.
        influence.append({key: -value for key, value in fixed.items()})
    shared = influence[0].keys() & influence[1].keys()
    variance = (math.fsum(v * v for v in influence[0].values())
                + math.fsum(v * v for v in influence[1].values())
                - 2 * math.fsum(influence[0][i] * influence[1][i] for i in shared))
    return normal_interval(bias[0] - bias[1], math.sqrt(max(variance, 0.0)),
                           confidence=confidence)


def _influences(period: Period, lam: float) -> dict[str, float]:
    """Each label's influence on the period's correction, by item: ``w (r - wmean r) / N``."""
    items = period.labelled
    weights = [1.0 / item.probability for item in items]
    residuals = [item.label - lam * item.judge for item in items]
    centre = math.fsum(w * r for w, r in zip(weights, residuals, strict=True)) / math.fsum(
        weights)
    found: dict[str, float] = {}
    for item, w, r in zip(items, weights, residuals, strict=True):
        if item.item in found:
            raise ValueError(f"{item.item!r} is twice in one pool")
        found[item.item] = w * (r - centre) / period.pool.n
    return found


def _judge_covariance(period: Period, corrected: Corrected) -> float:
    """``Cov(f, d)/N`` of a pool: how the judge's mean over its verdicts moves with its
    correction, per verdict."""
    m = _PoolMoments.of(period.pool, period.labelled)
    return (m.cov_fe - corrected.lam * m.cov_fg) / period.pool.n
