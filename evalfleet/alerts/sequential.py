"""A sequential rule's cycle for one segment: its detectors read the cycle's new samples
and say what the state machine is told. Pure.

A segment has one e-detector per test of its rule (``baseline``: the boundary is the
baseline's mean less its bound; ``threshold``: the threshold), each fixed before the
cycle from data read before it (``edetector``). The observation:

- ``breach`` while any detector's statistic is at its alarm level, ``clear`` otherwise;
- once the segment fires, the window decides as a fixed rule's hysteresis does:
  ``clear`` when the drop from the baseline is under ``min_effect`` by the recovery
  margin (and the mean past the threshold by it), else ``hold``;
- ``no_data`` for the whole traffic without samples; ``insufficient_data`` when no test
  can run (a baseline under ``min_samples`` and no threshold).

When an alert resolves, its detectors start again (:func:`after_events`), so the next
alarm needs new evidence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from evalfleet.alerts.detector import Finding, Observation
from evalfleet.alerts.edetector import (
    DetectorState,
    Evidence,
    Reference,
    alarm_level,
    baseline_reference,
    evidence,
    evidence_details,
    fleet_streams,
    oriented,
    reset,
    threshold_reference,
    update,
)
from evalfleet.alerts.incident import group, incident_details
from evalfleet.alerts.rule import Rule
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.statistic import Summary
from evalfleet.core.durations import format_duration

#: A score's variance when nothing is known of it (the largest in 0..1).
UNKNOWN_VARIANCE = 0.25


@dataclass(frozen=True)
class Watch:
    """One segment of a sequential rule after one cycle."""

    observation: Observation
    """What the state machine is told."""
    detectors: dict[str, DetectorState]
    """The detectors by test, to store."""
    details: dict[str, Any]
    """The evidence, as plain JSON data (``details["sequential"]``)."""


def level_of(rule: Rule) -> float:
    """The alarm level of each of ``rule``'s detectors: its ``run_length`` in cycles
    times the streams it may watch at once (``max_segments`` times its tests)."""
    spec = rule.spec
    tests = int(spec.uses_baseline) + int(spec.uses_threshold and spec.threshold is not None)
    return alarm_level(run_length_cycles=spec.run_length / spec.interval,
                       streams=fleet_streams(segments=spec.max_segments, tests=tests))


def read_start(stored: Mapping[str, DetectorState], *, rule: Rule, at: datetime) -> datetime:
    """Where this cycle's new samples begin: where the detectors last stopped reading (the
    latest of them, so no detector reads a sample twice; one that fell behind skips what
    it missed), never further back than one window (an evaluator that was away loses
    what is older), one interval back for a rule's first cycle."""
    spec = rule.spec
    if not stored:
        return at - spec.interval
    until = max(state.read_until for state in stored.values())
    return max(at - spec.window, datetime.fromtimestamp(until, tz=UTC))


def watch(rule: Rule, finding: Finding, *, stored: Mapping[str, DetectorState],
          increment: Summary, start: datetime, at: datetime, firing: bool,
          confidence: float) -> Watch:
    """Update the segment's detectors with the cycle's new samples and judge.

    Args:
        rule: A sequential rule.
        finding: The segment's window and baseline (no tests).
        stored: Its detectors before the cycle, by test.
        increment: The samples of ``[start, at)``.
        start: Where they begin.
        at: The evaluation time.
        firing: Whether the segment fires now (for the hysteresis of ``clear``).
        confidence: Coverage of the drop's confidence sequence.

    Returns:
        The observation, the detectors and their evidence.
    """
    spec = rule.spec
    level = level_of(rule)
    references = _references(rule, finding)
    detectors: dict[str, DetectorState] = {}
    shown: dict[str, Any] = {"level": level, "run_length": format_duration(spec.run_length)}
    new = _with_levels(oriented(increment, spec.direction), rule.score_kind)
    for name, reference in references.items():
        before = stored.get(name) or DetectorState.start(start.timestamp())
        state = before
        if at.timestamp() > before.read_until:  # a replay of the past reads nothing again
            state = update(before, new, reference, cycle_start=start.timestamp(),
                           cycle_end=at.timestamp())
        detectors[name] = state
        shown[name] = _shown(evidence(state, reference, level=level, confidence=confidence),
                             spec.direction)
    observation = _observe(rule, finding, detectors, level=level, firing=firing)
    return Watch(observation, detectors, shown)


def after_events(detectors: dict[str, DetectorState],
                 events: tuple[str, ...]) -> dict[str, DetectorState]:
    """The detectors after the state machine's events: started again on ``resolved``."""
    if "resolved" not in events:
        return detectors
    return {name: reset(state) for name, state in detectors.items()}


def untested(finding_segment: Segment, current: Summary,
             baseline: tuple[Segment, Summary] | None) -> Finding:
    """A sequential rule's finding: the window and baseline, no fixed-sample tests."""
    return Finding(segment=finding_segment, current=current,
                   baseline=baseline[1] if baseline else None,
                   baseline_segment=baseline[0] if baseline else None, tests=())


def parse_stored(data: Any) -> dict[str, DetectorState]:
    """Stored detectors by test; anything unreadable is left out (it starts again)."""
    if not isinstance(data, dict):
        return {}
    found = {}
    for name, stored in data.items():
        state = DetectorState.from_json(stored)
        if state is not None:
            found[str(name)] = state
    return found


def _references(rule: Rule, finding: Finding) -> dict[str, Reference]:
    spec = rule.spec
    references: dict[str, Reference] = {}
    baseline = finding.baseline
    if spec.uses_baseline and baseline is not None and baseline.n >= spec.min_samples:
        references["baseline"] = baseline_reference(oriented(baseline, spec.direction),
                                                    min_effect=spec.min_effect)
    if spec.uses_threshold and spec.threshold is not None:
        line = spec.threshold if spec.direction == "decrease" else 1.0 - spec.threshold
        spread = finding.current.variance if finding.current.n >= 2 else UNKNOWN_VARIANCE
        references["threshold"] = threshold_reference(line, min_effect=spec.min_effect,
                                                      variance=spread)
    return references


def _with_levels(summary: Summary, kind: str) -> Summary:
    """A yes/no score's counts per value, so its payoffs are exact."""
    if kind != "binary" or summary.levels or summary.n == 0:
        return summary
    ones = min(summary.n, max(0, round(summary.total)))
    levels = tuple((v, c) for v, c in ((0.0, summary.n - ones), (1.0, ones)) if c)
    return Summary(n=summary.n, total=summary.total, total_sq=summary.total_sq, levels=levels)


def _observe(rule: Rule, finding: Finding, detectors: Mapping[str, DetectorState], *,
             level: float, firing: bool) -> Observation:
    if finding.current.n == 0 and finding.segment.depth == 0:
        return "no_data"
    if not detectors:
        return "insufficient_data"
    if firing:
        # The alarm was raised; what is asked now is whether the window shows the drop
        # (the statistic falls only slowly after a drop ends, and starts again on resolve).
        return "clear" if _recovered(rule, finding) else "hold"
    if any(state.log_statistic >= math.log(level) for state in detectors.values()):
        return "breach"
    return "clear"


def _recovered(rule: Rule, finding: Finding) -> bool:
    spec = rule.spec
    margin = spec.recovery.margin
    current = oriented(finding.current, spec.direction)
    if current.n == 0:
        return False
    if spec.uses_threshold and spec.threshold is not None:
        line = spec.threshold if spec.direction == "decrease" else 1.0 - spec.threshold
        if current.mean < line + margin:
            return False
    baseline = finding.baseline
    if spec.uses_baseline and baseline is not None and baseline.n:
        drop = oriented(baseline, spec.direction).mean - current.mean
        return drop <= spec.min_effect - margin
    return True


def _shown(found: Evidence, direction: str) -> dict[str, Any]:
    details = evidence_details(found)
    started = details.get("change_started_at")
    if started is not None:
        details["change_started_at"] = datetime.fromtimestamp(started, tz=UTC).isoformat(
        ).replace("+00:00", "Z")
    details["direction"] = direction
    return details


def incident_members(findings: Mapping[Segment, Finding], watches: Mapping[Segment, Watch],
                     firing: set[Segment]) -> set[Segment]:
    """The segments in an incident this cycle: breaching, or firing before it (with a
    baseline to measure a drop against)."""
    return {segment for segment, finding in findings.items()
            if finding.baseline is not None and segment in watches
            and (watches[segment].observation == "breach" or segment in firing)}


def incidents_of(rule: Rule, findings: Mapping[Segment, Finding],
                 watches: Mapping[Segment, Watch], firing: set[Segment],
                 previous: Mapping[Segment, Mapping[str, Any]] | None = None,
                 explained: Mapping[Segment, Summary] | None = None,
                 ) -> dict[Segment, dict[str, Any]]:
    """Each firing or breaching segment's incident (``incident``), as plain data.

    Args:
        rule: A sequential rule.
        findings: This cycle's findings by segment (every segment: the cause is ranked
            over all of them).
        watches: Their detectors' verdicts.
        firing: Segments firing before the cycle.
        previous: The incident each segment carried last cycle (:func:`carried_incident`).
        explained: The window split by ``incident.explain_by`` (``window.fetch_explained``),
            on the rule's scale.

    Returns:
        The incident of every member, by segment.
    """
    direction = rule.spec.direction
    population = {
        segment: (oriented(finding.current, direction), oriented(finding.baseline, direction))
        for segment, finding in findings.items() if finding.baseline is not None
    }
    members = {segment: population[segment]
               for segment in incident_members(findings, watches, firing)}
    units = {unit: oriented(window, direction) for unit, window in (explained or {}).items()}
    found: dict[Segment, dict[str, Any]] = {}
    for incident in group(members, population=population, previous=previous,
                          explained=units):
        details = incident_details(incident)
        found.update({segment: details for segment in incident.members})
    return found


def carried_incident(finding: Mapping[str, Any]) -> dict[str, Any] | None:
    """The incident a segment's stored finding carries (None: in no incident)."""
    incident = finding.get("incident")
    return incident if isinstance(incident, dict) else None
