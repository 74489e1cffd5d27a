"""Incidents: firing segments grouped along the segment tree, the cause named."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from evalfleet.alerts import AlertEngine
from evalfleet.alerts.incident import cause_line, group, incident_details
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.statistic import Summary
from tests.evalfleet.alerts import stream
from tests.evalfleet.alerts.receiver import Receiver
from tests.evalfleet.alerts.test_sequential import MINUTE, RULE, T0, run

ROOT = Segment()
APP_A, APP_B = Segment.of({"app": "a"}), Segment.of({"app": "b"})
A_V1, A_V2 = (Segment.of({"app": "a", "prompt_version": v}) for v in ("v1", "v2"))


def pair(n: int, mean: float, baseline: float = 0.85) -> tuple[Summary, Summary]:
    return Summary(n=n, total=n * mean), Summary(n=10 * n, total=10 * n * baseline)


def test_a_drop_in_one_version_is_named_for_the_version() -> None:
    # a/v1 (100 samples) fell by 0.2; a/v2 (100) did not; b (200) did not.
    (incident,) = group({ROOT: pair(400, 0.80), APP_A: pair(200, 0.75), A_V1: pair(100, 0.65)})
    assert incident.head == ROOT
    assert incident.members == (ROOT, APP_A, A_V1)
    assert incident.cause == A_V1
    assert dict(incident.shares)[A_V1] == pytest.approx(1.0)


def test_a_drop_over_every_version_of_an_app_is_the_apps() -> None:
    (incident,) = group({ROOT: pair(400, 0.75), APP_A: pair(200, 0.65),
                         A_V1: pair(100, 0.65), A_V2: pair(100, 0.65)})
    assert incident.cause == APP_A


def test_two_apps_dropping_are_the_whole_traffics_or_two_incidents() -> None:
    both = group({ROOT: pair(400, 0.65), APP_A: pair(200, 0.65), APP_B: pair(200, 0.65)})
    assert [i.cause for i in both] == [ROOT]
    apart = group({APP_A: pair(200, 0.65), APP_B: pair(200, 0.65)})
    assert [(i.head, i.cause) for i in apart] == [(APP_A, APP_A), (APP_B, APP_B)]


def test_a_segment_without_samples_or_a_rise_explains_nothing() -> None:
    (incident,) = group({ROOT: pair(400, 0.90), APP_A: (Summary(n=0), Summary(n=0))})
    assert incident.cause == ROOT and dict(incident.shares)[APP_A] == 0.0
    line = cause_line(incident_details(incident))
    assert line.startswith("incident (all): (all) explains 0% of the drop")


def test_the_engine_names_the_planted_version_among_quiet_segments(
    open_engine: Callable[..., AlertEngine], receiver: Receiver,
) -> None:
    rule = {**RULE, "segment_by": ["app", "prompt_version"], "max_segments": 40}
    engine = open_engine(rule)
    points = []
    for app in range(6):
        for version in ("v1", "v2"):
            labels = {"app": f"app{app}", "prompt_version": version}
            planted = (app, version) == (0, "v2")
            points += stream.steady(start=T0 - timedelta(hours=3), minutes=210, seed=app * 7
                                    + (version == "v2"), per_minute=20, attributes=labels,
                                    mean=lambda ts, p=planted: 0.6 if p and ts >= T0 else 0.85)
    stream.write(engine.engine, points)
    reports = run(engine, T0 - 20 * MINUTE, 50)
    fired = {segment for report in reports for _, segment, event in report.events
             if event == "firing"}
    assert fired <= {"(all)", "app=app0", "app=app0,prompt_version=v2"}
    assert "app=app0,prompt_version=v2" in fired
    alerts = receiver.alerts()
    assert {a["labels"]["incident"] for a in alerts} <= {"(all)", "app=app0"}
    version = next(a for a in alerts if a["labels"].get("prompt_version") == "v2")
    assert version["annotations"]["incident_cause"] == "app=app0,prompt_version=v2"
    assert "explains" in version["annotations"]["description"]
