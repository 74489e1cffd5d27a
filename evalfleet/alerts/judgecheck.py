"""Whether people's labels confirm an app alert's drop, or the judge explains it.

An app alert compares the judge's mean over its window with the judge's mean over its
baseline. If the judge's bias (its score minus people's) moved between the two, the
raw drop is partly or wholly the judge's. Each period is corrected by the labelled random
review items of its own pool (:mod:`evalfleet.core.estimator`):

    corrected change = theta_window - theta_baseline
                     = (raw_window - raw_baseline) - (bias_window - bias_baseline)   (lam 1)

The pools, on sample time as the periods are (whenever the items were queued), bounded by
:func:`~evalfleet.core.labelpool.label_pool` as every corrected estimate is:

- the window's: ``label_window`` ending at the window's end (the window itself by default);
- the baseline's: ``label_window`` ending at the baseline's end (the baseline itself by
  default), in the baseline's segment (a pinned baseline's other value).

A pool no longer than its period is the period's own labels (``lam`` tuned). A longer one
assumes the judge's bias is steady over it (``lam`` 1); when the two pools overlap, their
shared labels make the two corrections move together, which the interval of the
difference accounts for (:func:`~evalfleet.core.estimator.corrected_difference`). Two
pools that overlap almost entirely share almost all of their correction, which then
cancels from the difference: such a check can only confirm the raw drop, it cannot see a
judge that changed in the window. That is why the default pool is the period itself.

The verdict, at the alert's own level (one-sided, in the alert's direction):

- ``too few labels``: fewer than ``min_labels`` labelled random items in either pool, or
  fewer than the estimator's per-stratum minimum (``min_stratum_labels``, at most
  ``min_labels``) in one of a pool's strata (``lacking`` says which);
- ``confirmed``: the corrected change's one-sided bound is past zero: people's mean moved
  the way the alert says;
- ``judge bias changed``: not confirmed, and the judge's bias moved between the pools the
  way that explains the raw drop (its one-sided bound past zero);
- ``not confirmed``: neither.

A cascade metric's pools follow its refits as every corrected estimate's do
(:func:`~evalfleet.store.queries.cascade_labels.cascade_pool_items`): with cross-fitted thresholds
each random item is re-scored with its fold's thresholds in use, so the pools keep their
length; without folds a refit is a judge change and each pool starts no earlier than
the last refit (a period's own labels always count). ``cascade_labels`` says which.

A threshold-only rule is checked the same way: the corrected window mean against the
threshold. The raw means are the alert's own (firing periods left out of a trailing
baseline); the pools' labels are all the pool's random items (sample time, no exclusion).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from evalfleet.alerts.detector import Finding
from evalfleet.alerts.rule import CalibrationBaseline, Direction, PinnedBaseline, Rule
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.statistic import Summary
from evalfleet.core.estimator import (
    MIN_STRATUM_LABELS,
    Corrected,
    Interval,
    Period,
    bias_difference,
    corrected_difference,
    corrected_mean,
    lacking_labels,
)
from evalfleet.core.labelpool import label_pool, pool_labels
from evalfleet.core.metric import MetricRegistry
from evalfleet.core.sums import RunningSums
from evalfleet.store import StoreConnection
from evalfleet.store.queries.cascade import StoredThresholds
from evalfleet.store.queries.cascade_labels import (
    cascade_fit,
    cascade_pool_items,
    cascade_refit,
    since_refit,
)
from evalfleet.store.queries.estimate import EstimateReads

CONFIRMED = "confirmed"
NOT_CONFIRMED = "not confirmed"
JUDGE_BIAS_CHANGED = "judge bias changed"
TOO_FEW_LABELS = "too few labels"

#: What a confirmation assumes, shown with it.
ASSUMPTION = ("assumes the judge's bias (its scores minus people's) is steady over each "
              "period's pool")


@dataclass(frozen=True, slots=True)
class Span:
    """One period of the check: where its verdicts are and where its labels come from."""

    segment: Segment
    start: datetime
    end: datetime
    labels_from: datetime
    """Start of the pool (sample time, :func:`~evalfleet.core.labelpool.label_pool`); it
    ends at ``end``."""

    def record(self) -> dict[str, Any]:
        return {"segment": str(self.segment), "start": _iso(self.start), "end": _iso(self.end),
                "labels_from": _iso(self.labels_from)}

    def after_refit(self, fit: StoredThresholds | None) -> Span:
        """This span with its pool starting no earlier than a refit that is not
        cross-fitted (a judge change), as every corrected estimate's pool does
        (:func:`~evalfleet.store.queries.cascade_labels.since_refit`)."""
        start = label_pool(start=self.start, end=self.end,
                           label_start=since_refit(fit, label_start=self.labels_from)).start
        return replace(self, labels_from=start)


def spans(rule: Rule, *, segment: Segment, baseline_segment: Segment | None,
          at: datetime) -> tuple[Span, Span | None]:
    """The window's span and the baseline's (None without one). Pure.

    Args:
        rule: An app rule.
        segment: The alert's segment.
        baseline_segment: Where its baseline came from (a pinned baseline's other value).
        at: The evaluation time; the window ends here.
    """
    spec = rule.spec
    pooled = spec.judge_check.label_window or timedelta(0)

    def span(where: Segment, start: datetime, end: datetime) -> Span:
        pool = label_pool(start=start, end=end, label_start=end - pooled)
        return Span(segment=where, start=start, end=end, labels_from=pool.start)

    window = span(segment, at - spec.window, at)
    baseline = spec.baseline
    if not spec.uses_baseline or isinstance(baseline, CalibrationBaseline):
        return window, None
    if isinstance(baseline, PinnedBaseline):
        if baseline_segment is None:
            return window, None
        return window, span(baseline_segment, at - baseline.window, at)
    end = at - spec.window - baseline.gap
    return window, span(segment, end - baseline.window, end)


def decide(change: Interval, bias: Interval, *, direction: Direction, pooled: bool) -> str:
    """The verdict of a check from its two intervals (each two-sided at ``2c - 1``, so
    the end on the alert's side is the one-sided bound at ``c``). Pure.

    Args:
        change: People's corrected change, window minus baseline.
        bias: The judge's bias change between the two pools.
        direction: The alert's.
        pooled: True when a pool reaches beyond its period (its correction assumes a
            steady bias).

    Returns:
        :data:`CONFIRMED`, :data:`JUDGE_BIAS_CHANGED` or :data:`NOT_CONFIRMED`.
    """
    worse = direction == "decrease"
    confirmed = change.high < 0 if worse else change.low > 0
    judge_moved = bias.high < 0 if worse else bias.low > 0
    # A pooled correction is only as good as a steady bias; a bias that moved the way
    # that explains the drop refutes it (in a simulation, pools sharing most labels
    # "confirmed" every drop that was the judge's alone).
    if judge_moved and (pooled or not confirmed):
        return JUDGE_BIAS_CHANGED
    return CONFIRMED if confirmed else NOT_CONFIRMED


class JudgeCheckSource:
    """The store's labels and verdicts, read to check app alerts.

    Args:
        reads: The reads of corrected estimates.
        registry: The metrics, for each score's scale.
    """

    def __init__(self, reads: EstimateReads, registry: MetricRegistry) -> None:
        self.reads = reads
        self.registry = registry

    def check(self, rule: Rule, finding: Finding, *, at: datetime, confidence: float,
              conn: StoreConnection | None = None) -> dict[str, Any] | None:
        """Whether people's labels confirm the finding's drop (see the module).

        Args:
            rule: An app rule.
            finding: Its finding for one segment (the raw window and baseline).
            at: The evaluation time.
            confidence: The alert's level (one-sided).
            conn: The connection to read on (the engine's transaction); None for the
                store's own.

        Returns:
            The check as plain JSON values, or None when the rule has it turned off, its
            metric is unknown, or there is nothing to compare with.
        """
        spec = rule.spec
        if not spec.judge_check.enabled or spec.kind != "app" or \
                spec.metric not in self.registry.names():
            return None
        reads = self.reads.on(conn) if conn is not None else self.reads
        # A cascade's labels measure the thresholds in use: re-scored when cross-fitted,
        # else only those since the last refit (as review estimate's).
        fit = cascade_fit(reads, metric=self.registry.get(spec.metric))
        window, baseline = spans(rule, segment=finding.segment,
                                 baseline_segment=finding.baseline_segment, at=at)
        window = window.after_refit(fit)
        baseline = baseline.after_refit(fit) if baseline is not None else None
        if baseline is not None and finding.baseline is not None and finding.baseline.n:
            return self._against_baseline(reads, rule, finding, window, baseline,
                                          confidence=confidence, fit=fit)
        if spec.uses_threshold and spec.threshold is not None:
            return self._against_threshold(reads, rule, finding, window,
                                           confidence=confidence, fit=fit)
        return None

    def _against_baseline(self, reads: EstimateReads, rule: Rule, finding: Finding,
                          window: Span, baseline: Span, *, confidence: float,
                          fit: StoredThresholds | None) -> dict[str, Any]:
        assert finding.baseline is not None
        found = [self._period(reads, rule, span, summary, other, fit=fit)
                 for span, summary, other in ((window, finding.current, baseline),
                                              (baseline, finding.baseline, window))]
        periods = [period for period, *_ in found]
        record = self._base(rule, confidence, [(window, *found[0]), (baseline, *found[1])],
                            fit=fit)
        record["raw_change"] = finding.current.mean - finding.baseline.mean
        if record["verdict"] == TOO_FEW_LABELS:
            return record
        # Two-sided at 2c - 1: its end on the alert's side is the one-sided bound at c.
        level = 2 * confidence - 1
        change = corrected_difference(periods[0], periods[1], confidence=level)
        bias = bias_difference(periods[0], periods[1], confidence=level)
        record.update(
            verdict=decide(change.interval, bias, direction=rule.spec.direction,
                           pooled=any(p.lam is not None for p in periods)),
            corrected_change=_interval(change.interval), bias_change=_interval(bias),
            shared_labels=change.shared, covariance=change.covariance)
        for name, corrected in (("window", change.first), ("baseline", change.second)):
            record[name].update(_corrected(corrected))
        return record

    def _against_threshold(self, reads: EstimateReads, rule: Rule, finding: Finding,
                           window: Span, *, confidence: float,
                           fit: StoredThresholds | None) -> dict[str, Any]:
        spec = rule.spec
        assert spec.threshold is not None
        period, lacking, not_rescored = self._period(reads, rule, window, finding.current,
                                                     None, fit=fit)
        record = self._base(rule, confidence, [(window, period, lacking, not_rescored)],
                            fit=fit)
        record["threshold"] = spec.threshold
        if record["verdict"] == TOO_FEW_LABELS:
            return record
        found = corrected_mean(period.window, period.pool, period.labelled,
                               confidence=2 * confidence - 1, lam=period.lam)
        past = (found.interval.high < spec.threshold if spec.direction == "decrease"
                else found.interval.low > spec.threshold)
        record["verdict"] = CONFIRMED if past else NOT_CONFIRMED
        record["window"].update(_corrected(found))
        return record

    def _base(self, rule: Rule, confidence: float,
              periods: Sequence[tuple[Span, Period, str | None, int]], *,
              fit: StoredThresholds | None) -> dict[str, Any]:
        minimum = rule.spec.judge_check.min_labels
        record: dict[str, Any] = {
            "verdict": None, "confidence": confidence, "min_labels": minimum,
            "min_stratum_labels": _stratum_minimum(minimum),
            "assumption": ASSUMPTION, "direction": rule.spec.direction,
            "cascade_labels": None if fit is None else cascade_refit(
                fit, start=periods[0][0].start, not_rescored=periods[0][3])}
        for name, (span, period, lacking, left_out) in zip(("window", "baseline"), periods,
                                                           strict=False):
            record[name] = {**span.record(), "labels": len(period.labelled),
                            "raw": period.window.mean if period.window.n else None,
                            "lacking": lacking, "not_rescored": left_out}
        if any(lacking is not None or period.window.n == 0
               or period.pool.n < len(period.labelled) for _, period, lacking, _ in periods):
            record["verdict"] = TOO_FEW_LABELS
        return record

    def _period(self, reads: EstimateReads, rule: Rule, span: Span, summary: Summary,
                other: Span | None, *, fit: StoredThresholds | None,
                ) -> tuple[Period, str | None, int]:
        """The period's verdicts, pool and labels, which labels it lacks (None: enough),
        and how many labelled items of a cross-fitted cascade could not be re-scored."""
        spec = rule.spec
        metric = self.registry.get(spec.metric)
        filters = spec.filter_values
        segment = span.segment.as_dict()
        own = RunningSums(n=summary.n, total=summary.total, total_sq=summary.total_sq)
        pooled = span.labels_from < span.start
        pool = own
        if pooled:
            sums = reads.score_sums(metric=spec.metric, score=spec.score,
                                         start=span.labels_from, end=span.end,
                                         segment=segment, filters=filters)
            if sums.n >= own.n:
                pool = RunningSums(n=sums.n, total=sums.total, total_sq=sums.total_sq)
        items, not_rescored = cascade_pool_items(reads, metric=metric, fit=fit,
                                                 start=span.labels_from, end=span.end)
        found = pool_labels(items, metric=metric, score=spec.score, segment=segment,
                            filters=filters)
        minimum = spec.judge_check.min_labels
        lacking = lacking_labels(found.strata, min_labels=minimum,
                                 min_stratum_labels=_stratum_minimum(minimum))
        return Period(window=own, pool=pool, labelled=found.items,
                      lam=1.0 if pooled else None,
                      inside_other_pool=_inside(span, other)), lacking, not_rescored


def _stratum_minimum(min_labels: int) -> int:
    """The estimator's per-stratum minimum, never above the rule's minimum in all (a rule
    content with fewer labels is not made stricter on a uniform slice)."""
    return min(MIN_STRATUM_LABELS, min_labels)


def _inside(span: Span, other: Span | None) -> float:
    """Share of ``span``'s verdicts in the other's pool, taken as its share of time (the
    same segment only)."""
    if other is None or other.segment != span.segment:
        return 0.0
    overlap = min(span.end, other.end) - max(span.start, other.labels_from)
    return max(0.0, overlap / (span.end - span.start))


def _interval(found: Interval) -> dict[str, float]:
    return {"value": found.value, "low": found.low, "high": found.high}


def _corrected(found: Corrected) -> dict[str, Any]:
    return {"corrected": _interval(found.interval), "lam": found.lam}


def _iso(moment: datetime) -> str:
    return moment.isoformat()


def check_line(check: Mapping[str, Any]) -> str:
    """A check as one line of plain text, for notifications, the page and the terminal.

    Args:
        check: What :meth:`JudgeCheckSource.check` returned (as stored).

    Returns:
        ``people's labels: <verdict>: corrected change ... (raw ...); judge bias change
        ...; labels N window / M baseline (K shared)``.
    """
    verdict = check.get("verdict")
    window, baseline = check.get("window") or {}, check.get("baseline") or {}
    counts = f"labels {window.get('labels', 0)} window"
    if baseline:
        counts += f" / {baseline.get('labels', 0)} baseline"
        if check.get("shared_labels"):
            counts += f" ({check['shared_labels']} shared)"
    counts += f", at least {check.get('min_labels')} each"
    # Each period's own list is joined with "; ", so each is named and bracketed.
    lacking = [f"{name} ({part['lacking']})" for name, part in
               (("window", window), ("baseline", baseline)) if part.get("lacking")]
    if lacking:
        counts += f" (lacking: {', '.join(lacking)})"
    parts = [f"people's labels: {verdict}"]
    if check.get("corrected_change"):
        parts.append(f"corrected change {_span(check['corrected_change'])} against raw "
                     f"{_number(check.get('raw_change'))}")
        parts.append(f"judge bias change {_span(check['bias_change'])}")
    elif (window.get("corrected") or {}).get("value") is not None:
        parts.append(f"corrected window mean {_span(window['corrected'], sign='')} against "
                     f"threshold {_number(check.get('threshold'), sign='')}")
    parts.append(counts)
    return "; ".join(parts)


def _span(found: Mapping[str, Any], *, sign: str = "+") -> str:
    return (f"{_number(found.get('value'), sign=sign)} [{_number(found.get('low'), sign=sign)}, "
            f"{_number(found.get('high'), sign=sign)}]")


def _number(value: Any, *, sign: str = "+") -> str:
    return "n/a" if value is None else f"{float(value):{sign}.3f}"
