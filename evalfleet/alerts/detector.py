"""From window summaries to observations: which tests run, and what their results mean. Pure.

A segment is tested only with at least ``min_samples`` values in its window (and in
its baseline, for the baseline test); otherwise it has insufficient data, while
its parent segments, with more samples, are still tested. The p-values of every
test of one cycle are adjusted together (Benjamini-Hochberg), so hundreds of
segments do not buy hundreds of chances of a false alarm. A segment breaches when
a test is significant after that adjustment and its effect is large enough.

A judge_drift rule is one more finding of the same kind: its canary agreement is
tested against the last calibration's like any score against its baseline, and
its canary bias against the calibration's bias once in each direction (a judge
may drift up or down); all of them join the cycle's adjustment.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from evalfleet.alerts.rule import Direction, PinnedBaseline, Rule
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.statistic import (
    Summary,
    TestResult,
    adjust_p_values,
    compare_with_baseline,
    compare_with_threshold,
    proportion_test,
    welch_t_test,
)
from evalfleet.core.durations import format_moment

Observation = Literal["breach", "clear", "hold", "insufficient_data", "no_data"]

#: The two one-sided tests of a judge_drift rule's bias: a judge drifting up, and down.
_BIAS_TESTS: tuple[tuple[Literal["bias_high", "bias_low"], Direction], ...] = (
    ("bias_high", "increase"), ("bias_low", "decrease"))

#: What the word ``previous`` means as a pinned baseline value.
PREVIOUS = "previous"


@dataclass(frozen=True)
class Finding:
    """One segment of one rule, tested (or not) in one cycle."""

    segment: Segment
    """The segment."""
    current: Summary
    """The window's values (``n == 0`` when the segment had none)."""
    baseline: Summary | None
    """The baseline's values, None without a baseline."""
    baseline_segment: Segment | None
    """Where the baseline came from (a pinned baseline names another value)."""
    tests: tuple[TestResult, ...]
    """The tests that ran; empty when the data did not allow any."""
    note: str | None = None
    """Why a test that should run could not (a judge_drift rule without a baseline)."""


@dataclass(frozen=True)
class Judgement:
    """A finding after the cycle's multiple-testing adjustment."""

    rule: Rule
    """The rule."""
    finding: Finding
    """The finding."""
    q_values: tuple[float, ...]
    """Benjamini-Hochberg adjusted p-values, one per test."""
    observation: Observation
    """What the state machine is told."""


def pair_baselines(
    rule: Rule, *, current: Mapping[Segment, Summary], reference: Mapping[Segment, Summary],
) -> dict[Segment, tuple[Segment, Summary] | None]:
    """The baseline of each current segment.

    Args:
        rule: The rule.
        current: Window summaries by segment.
        reference: Summaries of the baseline query: the trailing window, or for a pinned
            baseline every value of its key over the look-back window.

    Returns:
        For each current segment, the baseline segment and its summary, or None.
    """
    baseline = rule.spec.baseline
    paired: dict[Segment, tuple[Segment, Summary] | None] = {}
    for segment in current:
        if not isinstance(baseline, PinnedBaseline):
            source: Segment | None = segment
        else:
            source = _pinned_source(segment, baseline, reference)
        summary = reference.get(source) if source is not None else None
        paired[segment] = (source, summary) if source is not None and summary else None
    return paired


def _pinned_source(
    segment: Segment, baseline: PinnedBaseline, reference: Mapping[Segment, Summary],
) -> Segment | None:
    if not segment.labels:
        return None
    value = segment.as_dict()[baseline.key]
    if baseline.value != PREVIOUS:
        return None if value == baseline.value else segment.replace(baseline.key, baseline.value)
    first_seen = {
        seg.labels[0][1]: summary.first_seen_ts for seg, summary in reference.items()
        if seg.depth == 1 and summary.first_seen_ts is not None
    }
    own = first_seen.get(value)
    if own is None:
        return None
    earlier = [(ts, other) for other, ts in first_seen.items() if ts is not None and ts < own]
    if not earlier:
        return None
    return segment.replace(baseline.key, max(earlier)[1])


def examine(
    rule: Rule, *, segment: Segment, current: Summary,
    baseline: tuple[Segment, Summary] | None, confidence: float,
) -> Finding:
    """Run the rule's tests on one segment, where its data allows.

    Args:
        rule: The rule.
        segment: The segment.
        current: Its window.
        baseline: Its baseline segment and summary, if any.
        confidence: Level of the bounds and intervals.

    Returns:
        The finding; no tests when the window (or every test's input) is too small.
    """
    spec = rule.spec
    tests: list[TestResult] = []
    if current.n >= spec.min_samples:
        if spec.uses_threshold and spec.threshold is not None:
            tests.append(compare_with_threshold(
                rule.score_kind, current=current, threshold=spec.threshold,
                direction=spec.direction, confidence=confidence))
        if spec.uses_baseline and baseline is not None and baseline[1].n >= spec.min_samples:
            tests.append(compare_with_baseline(
                rule.score_kind, current=current, baseline=baseline[1], direction=spec.direction,
                confidence=confidence))
    return Finding(
        segment=segment, current=current,
        baseline=baseline[1] if baseline else None,
        baseline_segment=baseline[0] if baseline else None, tests=tuple(tests),
    )


@dataclass(frozen=True)
class DriftBaseline:
    """What a judge_drift rule compares canaries with: one calibration run's series."""

    agreement: Summary
    """Agreement with the gold labels over the calibration's verdicts."""
    bias: Summary
    """Signed bias over the same verdicts."""
    source: str
    """Which run, for people: metric, prompt version, judge model, gold set and time."""


def drift_baseline(runs: Iterable[Any], *, score: str,
                   judge_models: Collection[str] = ()) -> DriftBaseline | str:
    """The baseline of a judge_drift rule on ``score``, from its metric's calibrations.

    Args:
        runs: The metric's calibration runs (``CalibrationRun``), newest first.
        score: The score watched.
        judge_models: The judge models that judged the window's canaries: a calibration
            of one of them is preferred, so calibrating a candidate judge
            (``--judge-model``) does not move the current judge's baseline.

    Returns:
        The last gold-set calibration's summaries of ``score``'s canary series, or why
        there is none (a person reads it on the page).
    """
    gold = [run for run in runs if not str(run.gold).startswith("judge:")]
    # With no calibration of the canaries' judge, the last one is the reference: a judge
    # swapped without calibrating is exactly what canaries should catch.
    run = next((run for run in gold if run.judge_model in judge_models),
               gold[0] if gold else None)
    if run is None:
        return "no baseline: no calibration run of this metric (run `evalfleet calibrate`)"
    source = (f"calibration of {run.metric} on {run.gold} at {_moment(run.created_at)}, "
              f"prompt {run.prompt_version}, judge {run.judge_model}")
    stored = (run.report.get("canary_baseline") or {}).get(score) or {}
    try:
        agreement, bias = (_summary(stored[part]) for part in ("agreement", "bias"))
    except (KeyError, TypeError, ValueError):
        return (f"no baseline: the last {source} has no canary summary of {score!r} (label "
                f"it in the gold set and run `evalfleet calibrate` again)")
    return DriftBaseline(agreement=agreement, bias=bias, source=source)


def _summary(stored: Any) -> Summary:
    n, total, total_sq = int(stored["n"]), float(stored["total"]), float(stored["total_sq"])
    if n < 0 or not all(math.isfinite(v) for v in (total, total_sq)):
        raise ValueError("not a summary")
    return Summary(n=n, total=total, total_sq=total_sq)


def _moment(value: Any) -> str:
    return format_moment(value) if isinstance(value, datetime) else str(value)


def examine_drift(
    rule: Rule, *, current: Summary, bias: Summary, baseline: DriftBaseline | str,
    confidence: float,
) -> Finding:
    """Run a judge_drift rule's tests on the canaries of its window.

    Args:
        rule: A judge_drift rule.
        current: The window's canary agreement.
        bias: The window's canary bias.
        baseline: The calibration's series, or why there is none.
        confidence: Level of the bounds and intervals.

    Returns:
        The finding of the whole (drift has no segments); without a baseline only the
        threshold test can run, and the finding says why.
    """
    root = Segment()
    if isinstance(baseline, str):
        finding = examine(rule, segment=root, current=current, baseline=None,
                          confidence=confidence)
        return replace(finding, note=baseline)
    finding = examine(rule, segment=root, current=current,
                      baseline=(root, baseline.agreement), confidence=confidence)
    spec = rule.spec
    tests = list(finding.tests)
    if spec.uses_baseline and min(bias.n, baseline.bias.n) >= spec.min_samples:
        tests += [replace(test, against=against)
                  for against, test in _bias_tests(rule, bias, baseline.bias,
                                                   confidence=confidence)]
    return replace(finding, tests=tuple(tests), note=f"baseline: {baseline.source}")


def _bias_tests(rule: Rule, bias: Summary, baseline: Summary, *, confidence: float,
                ) -> list[tuple[Literal["bias_high", "bias_low"], TestResult]]:
    if rule.score_kind != "binary":
        return [(against, welch_t_test(bias, baseline, direction=direction))
                for against, direction in _BIAS_TESTS]
    # A yes/no judge's bias is two error rates: "yes" where people said no (+1) and "no"
    # where they said yes (-1). Each is a proportion, tested as one, so a calibration
    # with no error of a kind (a rate of 0 seen on a few items) is not taken as certain.
    return [
        ("bias_high", proportion_test(_errors(bias, +1), _errors(baseline, +1),
                                      direction="increase", confidence=confidence)),
        ("bias_low", proportion_test(_errors(bias, -1), _errors(baseline, -1),
                                     direction="increase", confidence=confidence)),
    ]


def _errors(bias: Summary, sign: int) -> Summary:
    """How many of a yes/no judge's biases (each -1, 0 or +1) were ``sign``, as a
    proportion: the sum of squares counts both kinds, the sum their difference."""
    count = max(0, round((bias.total_sq + sign * bias.total) / 2))
    return Summary(n=bias.n, total=float(count), total_sq=float(count))


def judge(
    findings: Sequence[tuple[Rule, Finding]], *, false_discovery_rate: float,
) -> list[Judgement]:
    """Adjust all p-values of a cycle together and turn each finding into an observation.

    Args:
        findings: Every finding of the cycle, all rules together.
        false_discovery_rate: The Benjamini-Hochberg level.

    Returns:
        One judgement per finding, in the same order.
    """
    p_values = [test.p_value for _, finding in findings for test in finding.tests]
    adjusted = iter(adjust_p_values(p_values))
    judgements = []
    for rule, finding in findings:
        q_values = tuple(next(adjusted) for _ in finding.tests)
        observation = _observe(rule, finding, q_values, rate=false_discovery_rate)
        judgements.append(Judgement(rule, finding, q_values, observation))
    return judgements


def _observe(
    rule: Rule, finding: Finding, q_values: tuple[float, ...], *, rate: float,
) -> Observation:
    if finding.current.n == 0 and finding.segment.depth == 0:
        return "no_data"
    if not finding.tests:
        return "insufficient_data"
    spec = rule.spec
    if any(q <= rate and _large_enough(test, spec.min_effect)
           for test, q in zip(finding.tests, q_values, strict=True)):
        return "breach"
    margin = spec.recovery.margin
    if all(_cleared(test, spec.min_effect, margin) for test in finding.tests):
        return "clear"
    return "hold"


def _large_enough(test: TestResult, min_effect: float) -> bool:
    # A threshold is itself the size that matters: past it by any amount counts.
    if test.against == "threshold":
        return test.effect > 0
    return test.effect > 0 and test.effect >= min_effect


def _cleared(test: TestResult, min_effect: float, margin: float) -> bool:
    # Hysteresis: back on the good side by a margin, not merely no longer significant.
    if test.against == "threshold":
        return test.effect <= -margin
    return test.effect <= min_effect - margin


def finding_details(judgement: Judgement) -> dict[str, object]:
    """The numbers of a judgement as plain JSON data (stored with the state, shown by the CLI)."""
    finding = judgement.finding
    details: dict[str, object] = {
        "n": finding.current.n,
        "mean": _number(finding.current.mean),
        "observation": judgement.observation,
    }
    if finding.baseline is not None:
        details["baseline_n"] = finding.baseline.n
        details["baseline_mean"] = _number(finding.baseline.mean)
        if finding.baseline_segment is not None and finding.baseline_segment != finding.segment:
            details["baseline_segment"] = str(finding.baseline_segment)
    if finding.note is not None:
        details["note"] = finding.note
    details["tests"] = [
        {"against": test.against, "test": test.test, "p_value": test.p_value,
         "q_value": q, "effect": test.effect, "statistic": _number(test.statistic),
         "bound": test.bound, "interval": test.interval,
         "baseline_interval": test.baseline_interval}
        for test, q in zip(finding.tests, judgement.q_values, strict=True)
    ]
    return details


def _number(value: float) -> float | None:
    return None if math.isnan(value) or math.isinf(value) else value
