"""A simulated week of a 300-segment sequential rule, two planted drops among them: the
engine's cycle (detectors, incidents, state machine, notifications) run every 30 minutes
over synthetic per-cycle sums, as the store would give them, and the notifications
grouped as an Alertmanager grouping by ``incident`` would: two incidents, each named for
its planted cause, each resolved, and nothing else.

The store's reads are left out so that a week runs in seconds: the engine's own tests
(``test_sequential.py``, ``test_incident.py``) cover the same steps through Postgres and a
real receiver. Seeded: the figures are the same on every run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from evalfleet.alerts.alert import build_alert
from evalfleet.alerts.edetector import DetectorState
from evalfleet.alerts.rule import AlertRule, Rule
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.sequential import after_events, incidents_of, untested, watch
from evalfleet.alerts.state import AlertState, Policy, advance
from evalfleet.alerts.statistic import Summary

START = datetime(2026, 11, 16, tzinfo=UTC)
INTERVAL = timedelta(minutes=30)
#: A week of cycles; window, gap and trailing baseline, in cycles.
CYCLES, WINDOW, GAP, BASELINE = 7 * 48, 2, 2, 48
APPS, VERSIONS = 23, 12  # 276 app-and-version segments, 23 apps and the whole: 300
#: Judged samples a cycle per app-and-version segment; the score's mean before a drop.
PER_CYCLE, MEAN = 30, 0.8

#: The rule, as a rules file would write it.
FIELDS = {
    "name": "quality_drop", "metric": "rag_qa", "score": "faithfulness",
    "test": "sequential", "segment_by": ["app", "prompt_version"], "max_segments": 300,
    "interval": "30m", "window": "1h", "min_samples": 30, "min_effect": 0.05,
    "mode": "baseline", "baseline": {"type": "trailing", "window": "1d", "gap": "1h"},
    "for": 1, "recovery": {"for": 3, "margin": 0.02},
}
SPEC = AlertRule.model_validate(FIELDS)
RULE = Rule(spec=SPEC, score_kind="continuous")
POLICY = Policy(for_count=1, recovery_count=3, renotify=SPEC.renotify, no_data="ok")


@dataclass(frozen=True)
class Drop:
    """A drop planted in the leaves whose labels include ``where``."""

    where: dict[str, str]
    size: float
    first: int
    last: int


#: One prompt version of one app, on day 2; one app in every version, on day 5.
DROPS = (Drop({"app": "a03", "prompt_version": "v05"}, 0.15, 2 * 48 + 20, 2 * 48 + 32),
         Drop({"app": "a17"}, 0.08, 5 * 48 + 8, 5 * 48 + 24))


def leaf_sums(seed: int = 11) -> dict[Segment, np.ndarray]:
    """Per app-and-version segment, per cycle: count, sum and sum of squares of a skewed
    score in 0..1 (Beta, mean 0.8), lowered where a drop is planted."""
    rng = np.random.default_rng(seed)
    leaves = {}
    for app in range(APPS):
        for version in range(VERSIONS):
            labels = {"app": f"a{app:02d}", "prompt_version": f"v{version:02d}"}
            mean = np.full(CYCLES, MEAN)
            for drop in DROPS:
                if drop.where.items() <= labels.items():
                    mean[drop.first:drop.last] -= drop.size
            counts = rng.poisson(PER_CYCLE, CYCLES)
            values = rng.beta(5 * np.repeat(mean, counts), 5 * (1 - np.repeat(mean, counts)))
            cycle = np.repeat(np.arange(CYCLES), counts)
            leaves[Segment.of(labels)] = np.stack(
                [counts, np.bincount(cycle, values, CYCLES),
                 np.bincount(cycle, values * values, CYCLES)], axis=1)
    return leaves


def tree(leaves: dict[Segment, np.ndarray]) -> dict[Segment, np.ndarray]:
    """Every segment of the rule (the whole, each app, each version) as running sums."""
    sums: dict[Segment, np.ndarray] = {}
    for leaf, values in leaves.items():
        for depth in range(3):
            segment = Segment(leaf.labels[:depth])
            sums[segment] = sums.get(segment, np.zeros_like(values)) + values
    return {s: np.concatenate([np.zeros((1, 3)), np.cumsum(v, axis=0)]) for s, v in sums.items()}


def between(running: np.ndarray, first: int, end: int) -> Summary:
    n, total, total_sq = running[max(end, 0)] - running[max(first, 0)]
    return Summary(n=int(n), total=float(total), total_sq=float(total_sq))


def run_week(running: dict[Segment, np.ndarray]) -> list[dict[str, Any]]:
    """The engine's cycle every 30 minutes from day 1 on; the notifications sent."""
    states: dict[Segment, AlertState] = {}
    detectors: dict[Segment, dict[str, DetectorState]] = {}
    carried: dict[Segment, dict[str, Any]] = {}
    sent = []
    for t in range(BASELINE + WINDOW + GAP, CYCLES):
        at = START + (t + 1) * INTERVAL
        findings = {s: untested(s, between(r, t + 1 - WINDOW, t + 1),
                                (s, between(r, t + 1 - WINDOW - GAP - BASELINE,
                                            t + 1 - WINDOW - GAP)))
                    for s, r in running.items()}
        watches = {s: watch(RULE, findings[s], stored=detectors.get(s, {}),
                            increment=between(running[s], t, t + 1), start=at - INTERVAL,
                            at=at, firing=s in states and states[s].state == "firing",
                            confidence=0.95) for s in running}
        firing = {s for s, state in states.items() if state.state == "firing"}
        incidents = incidents_of(RULE, findings, watches, firing, previous=carried)
        carried = incidents
        for segment, watched in watches.items():
            step = advance(states.get(segment) or AlertState.initial(at), watched.observation,
                           policy=POLICY, at=at)
            states[segment] = step.state
            detectors[segment] = after_events(watched.detectors, step.events)
            details = {"sequential": watched.details, "incident": incidents.get(segment)}
            sent += [build_alert(rule=RULE, segment=segment, event=event, state=step.state,
                                 details=details, at=at, external_url="http://evalfleet")
                     for event in step.events]
    return sent


def group_by_incident(sent: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """What an Alertmanager with ``group_by: [alertname, incident]`` makes of them."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for alert in sent:
        groups.setdefault(alert["labels"].get("incident", "-"), []).append(alert)
    return groups


def test_a_week_of_300_segments_with_two_drops_is_two_incidents() -> None:
    running = tree(leaf_sums())
    assert len(running) == 300
    groups = group_by_incident(run_week(running))
    assert set(groups) == {"app=a03,prompt_version=v05", "app=a17"}, sorted(groups)
    for drop, (key, alerts) in zip(DROPS, sorted(groups.items()), strict=True):
        fired = [a for a in alerts if a["status"] == "firing"]
        first = min(datetime.fromisoformat(a["startsAt"]) for a in fired)
        began = START + drop.first * INTERVAL
        assert began < first <= began + 4 * INTERVAL, key
        # Every notification of the incident names the planted cause, and only segments
        # under it (or the app above a version) fire.
        assert {a["annotations"]["incident_cause"] for a in fired} == {key}
        assert all(a["labels"]["app"] == drop.where["app"] for a in fired)
        # It resolves when its last segment does: every segment that fired resolved.
        segments = {a["annotations"]["segment"] for a in fired}
        resolved = {a["annotations"]["segment"] for a in alerts if a["status"] == "resolved"}
        assert resolved == segments, key
        assert min(datetime.fromisoformat(a["endsAt"]) for a in alerts
                   if a["status"] == "resolved") > START + drop.last * INTERVAL
