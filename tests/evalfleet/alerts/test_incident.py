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
    (incident,) = group({ROOT: pair(400, 0.80), APP_A: pair(200, 0.75), A_V1: pair(100, 0.65)},
                        population={A_V2: pair(100, 0.85), APP_B: pair(200, 0.85)})
    assert incident.head == ROOT and incident.key == "(all)"
    assert incident.members == (ROOT, APP_A, A_V1)
    assert incident.cause == A_V1
    assert incident.explains == pytest.approx(1.0)
    assert incident.ranked[:2] == (("app", "a", pytest.approx(1.0)),
                                   ("prompt_version", "v1", pytest.approx(1.0)))


def test_a_drop_over_every_version_of_an_app_is_the_apps() -> None:
    (incident,) = group({ROOT: pair(400, 0.75), APP_A: pair(200, 0.65),
                         A_V1: pair(100, 0.65), A_V2: pair(100, 0.65)},
                        population={APP_B: pair(200, 0.85)})
    assert incident.cause == APP_A
    assert dict(((k, v), s) for k, v, s in incident.ranked)[("prompt_version", "v1")] == \
        pytest.approx(0.5)


def test_a_version_deployed_to_every_app_is_named_across_the_tree() -> None:
    # v2 dropped in all four apps, v1 in none: no node of the tree is "v2", the cause is.
    population = {ROOT: pair(800, 0.75)}
    for app in "abcd":
        population[Segment.of({"app": app})] = pair(200, 0.75)
        for version, mean in (("v1", 0.85), ("v2", 0.65)):
            population[Segment.of({"app": app, "prompt_version": version})] = pair(100, mean)
    firing = {s: p for s, p in population.items() if s.depth < 2 or p[0].mean < 0.8}
    (incident,) = group(firing, population=population)
    assert incident.cause == Segment.of({"prompt_version": "v2"})
    assert str(incident.cause) == "prompt_version=v2"
    assert incident.ranked[0][:2] == ("prompt_version", "v2")
    assert incident.explains == pytest.approx(1.0)


def test_two_apps_dropping_are_the_whole_traffics_or_two_incidents() -> None:
    both = group({ROOT: pair(400, 0.65), APP_A: pair(200, 0.65), APP_B: pair(200, 0.65)})
    assert [i.cause for i in both] == [ROOT]
    apart = group({APP_A: pair(200, 0.65), APP_B: pair(200, 0.65)})
    assert [(i.head, i.cause) for i in apart] == [(APP_A, APP_A), (APP_B, APP_B)]


def test_an_incident_keeps_its_key_as_segments_join_and_leave() -> None:
    (opened,) = group({A_V1: pair(100, 0.65)})
    assert opened.key == "app=a,prompt_version=v1"
    (joined,) = group({APP_A: pair(200, 0.75), A_V1: pair(100, 0.65)},
                      population={A_V2: pair(100, 0.85)},
                      previous={A_V1: incident_details(opened)})
    assert joined.head == APP_A and joined.key == opened.key and joined.cause == A_V1
    carried = incident_details(joined)
    (left,) = group({APP_A: pair(200, 0.80)}, previous={APP_A: carried, A_V1: carried})
    assert left.key == opened.key
    # The app's window no longer shows a drop while it counts its recovery: the cause
    # seen while it did still stands.
    (recovering,) = group({APP_A: pair(200, 0.86)}, previous={APP_A: carried})
    assert recovering.cause == A_V1 and recovering.explains == pytest.approx(1.0)


def test_a_segment_without_samples_or_a_rise_explains_nothing() -> None:
    (incident,) = group({ROOT: pair(400, 0.90), APP_A: (Summary(n=0), Summary(n=0))})
    assert incident.cause == ROOT and incident.explains == 0.0
    line = cause_line(incident_details(incident))
    assert line.startswith("incident (all): (all) explains 0% of the drop")


def test_the_cause_line_ranks_the_attribute_values() -> None:
    (incident,) = group({ROOT: pair(400, 0.80), APP_A: pair(200, 0.75), A_V1: pair(100, 0.65)},
                        population={A_V2: pair(100, 0.85), APP_B: pair(200, 0.85)})
    line = cause_line(incident_details(incident))
    assert line.startswith("incident (all): app=a,prompt_version=v1 explains 100% of the drop "
                           "(by attribute: app=a 100%; prompt_version=v1 100%;")
    assert line.endswith("firing: (all), app=a, app=a,prompt_version=v1")


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
    stream.write(engine.store.engine, points)
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


@pytest.mark.parametrize("stored", [
    {"key": "app=a", "cause_labels": "garbage", "explains": 1, "ranked": []},
    {"key": "app=a"},                                  # stored before causes were kept
    {"key": 5, "cause_labels": [["app", "a"]]},        # not a key: a new incident
])
def test_a_damaged_stored_incident_falls_back_to_the_head(stored: dict[str, object]) -> None:
    (incident,) = group({APP_A: pair(200, 0.86)}, previous={APP_A: stored})
    assert incident.key == "app=a" and incident.cause == APP_A
