"""Incidents named by a cause outside the segment tree: a judge model, a prompt version
that is not a segment key (``incident.explain_by``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import timedelta

import pytest
from pydantic import ValidationError

from evalfleet.alerts import AlertEngine
from evalfleet.alerts.incident import group, incident_details
from evalfleet.alerts.rule import AlertRule
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.statistic import Summary
from tests.evalfleet.alerts import stream
from tests.evalfleet.alerts.receiver import Receiver
from tests.evalfleet.alerts.test_incident import pair
from tests.evalfleet.alerts.test_sequential import MINUTE, RULE, T0, run

ROOT = Segment()
APPS = [Segment.of({"app": app}) for app in "abcdef"]


def window(n: int, mean: float) -> Summary:
    return Summary(n=n, total=n * mean)


def judged(judge_of: Callable[[int], str], *, mean_of: Callable[[str], float],
           attribute: str = "judge_model") -> tuple[dict[Segment, tuple[Summary, Summary]],
                                                    dict[Segment, Summary]]:
    """Six apps of 200 samples, each judged (or deployed) by one value; its score by value."""
    population, units = {}, {}
    for i, app in enumerate(APPS):
        value = judge_of(i)
        population[app] = pair(200, mean_of(value))
        units[Segment((*app.labels, (attribute, value)))] = window(200, mean_of(value))
    root_mean = sum(p[0].mean for p in population.values()) / len(population)
    population[ROOT] = pair(1200, root_mean)
    return population, units


def test_a_judge_model_behind_several_apps_is_named() -> None:
    # Apps a, b, c moved to judge j2, which scores 0.2 lower; d, e, f kept j1.
    population, units = judged(lambda i: "j2" if i < 3 else "j1",
                               mean_of=lambda j: 0.65 if j == "j2" else 0.85)
    firing = {s: p for s, p in population.items() if p[0].mean < 0.8}
    (incident,) = group(firing, population=population, explained=units)
    assert incident.head == ROOT
    assert incident.cause == Segment.of({"judge_model": "j2"})
    assert incident.explains == pytest.approx(1.0)
    assert incident.ranked[0] == ("judge_model", "j2", pytest.approx(1.0))
    # Each app alone explains a third: none of them is the cause.
    assert dict(((k, v), s) for k, v, s in incident.ranked)[("app", "a")] == pytest.approx(1 / 3)


def test_a_value_every_sample_carries_says_nothing() -> None:
    # One judge for everything; app a dropped: the app is the cause, not the judge.
    population, units = judged(lambda i: "j1", mean_of=lambda j: 0.85)
    population[APPS[0]] = pair(200, 0.45)
    units[Segment((*APPS[0].labels, ("judge_model", "j1")))] = window(200, 0.45)
    population[ROOT] = pair(1200, (0.45 + 5 * 0.85) / 6)
    (incident,) = group({ROOT: population[ROOT], APPS[0]: population[APPS[0]]},
                        population=population, explained=units)
    assert incident.cause == APPS[0]
    assert ("judge_model", "j1", pytest.approx(1.0)) in incident.ranked


def test_a_named_judge_stays_named_once_it_carries_the_whole_window() -> None:
    population, units = judged(lambda i: "j2" if i < 3 else "j1",
                               mean_of=lambda j: 0.65 if j == "j2" else 0.85)
    firing = {s: p for s, p in population.items() if p[0].mean < 0.8}
    (first,) = group(firing, population=population, explained=units)
    # Later every app is on j2 and every app has dropped.
    population, units = judged(lambda i: "j2", mean_of=lambda j: 0.65)
    (later,) = group(population, population=population,
                     previous={s: incident_details(first) for s in firing}, explained=units)
    assert later.key == first.key and later.cause == Segment.of({"judge_model": "j2"})
    # Without that history the whole traffic is all that can be said.
    (fresh,) = group(population, population=population, explained=units)
    assert fresh.cause == ROOT


@pytest.mark.parametrize("labels", ["garbage", [[["judge_model"], "j2"], "x", [1]], None])
def test_a_damaged_stored_cause_is_ranked_afresh(labels: object) -> None:
    population, units = judged(lambda i: "j2" if i < 3 else "j1",
                               mean_of=lambda j: 0.65 if j == "j2" else 0.85)
    stored = {"key": "(all)", "cause_labels": labels}
    (incident,) = group({ROOT: population[ROOT]}, population=population,
                        previous={ROOT: stored}, explained=units)
    assert incident.key == "(all)"
    assert incident.cause == Segment.of({"judge_model": "j2"})


def test_a_unit_measured_against_its_segment_baseline() -> None:
    # j2 is new: it has no baseline of its own; its apps' baselines measure it.
    population, units = judged(lambda i: "j2" if i == 1 else "j1",
                               mean_of=lambda j: 0.55 if j == "j2" else 0.85)
    units[Segment((*APPS[1].labels, ("judge_model", "j1")))] = window(100, 0.85)
    (incident,) = group({APPS[1]: population[APPS[1]]}, population=population,
                        explained=units)
    assert incident.cause == Segment((*APPS[1].labels, ("judge_model", "j2")))


def test_explain_by_is_configurable_and_checked() -> None:
    rule = {**RULE, "metric": "rag_qa", "score": "faithfulness",
            "segment_by": ["app", "prompt_version"]}
    spec = AlertRule.model_validate(
        {**rule, "incident": {"explain_by": ["judge_model", "prompt_version", "deploy"]}})
    assert spec.explain_keys == ("judge_model", "deploy")
    assert AlertRule.model_validate(rule).explain_keys == ("judge_model",)
    for bad in (["judge_model", "judge_model"], ["not a name"]):
        with pytest.raises(ValidationError, match="explain_by"):
            AlertRule.model_validate({**rule, "incident": {"explain_by": bad}})


def _apps(*, judge_of: Callable[[int], str], version_of: Callable[[int], str],
          planted: Callable[[int], bool]) -> list[stream.Point]:
    """Six apps at 20 samples a minute for 3.5 h; the planted ones drop 0.25 from T0,
    when their judge model or prompt version changes."""
    points = []
    for app in range(6):
        labels = {"app": f"app{app}"}
        dropped = planted(app)
        for point in stream.steady(
                start=T0 - timedelta(hours=3), minutes=210, seed=app, per_minute=20,
                attributes=labels,
                mean=lambda ts, p=dropped: 0.6 if p and ts >= T0 else 0.85):
            after = point.sample_ts >= T0
            points.append(dataclasses.replace(
                point, judge_model=judge_of(app) if after else "j1",
                attributes={**labels, "prompt_version": version_of(app) if after else "v1"}))
    return points


def _causes(receiver: Receiver) -> set[str]:
    return {a["annotations"].get("incident_cause", "") for a in receiver.alerts()}


def test_the_engine_names_the_judge_model_behind_three_apps(
    open_engine: Callable[..., AlertEngine], receiver: Receiver,
) -> None:
    engine = open_engine({**RULE, "incident": {"explain_by": ["judge_model"]}})
    stream.write(engine.store.engine, _apps(judge_of=lambda a: "j2" if a < 3 else "j1",
                                      version_of=lambda a: "v1", planted=lambda a: a < 3))
    reports = run(engine, T0 - 20 * MINUTE, 40)
    fired = {segment for report in reports for _, segment, event in report.events
             if event == "firing"}
    assert fired and fired <= {"(all)", "app=app0", "app=app1", "app=app2"}
    assert "(all)" in fired
    head = [a for a in receiver.alerts() if a["labels"].get("app") is None]
    assert head[-1]["annotations"]["incident_cause"] == "judge_model=j2"
    # Ranked first, ahead of each app (the shares are of the whole traffic's drop
    # measured against its own baseline, so they need not add up to 100%).
    assert "(by attribute: judge_model=j2 " in head[-1]["annotations"]["description"]


@pytest.mark.parametrize("alert_database", ["postgres", "sqlite"], indirect=True)
def test_the_engine_names_a_prompt_version_that_is_not_a_segment_key(
    open_engine: Callable[..., AlertEngine], receiver: Receiver,
) -> None:
    # segment_by is [app]; prompt_version is ranked by the default explain_by.
    engine = open_engine(RULE)
    stream.write(engine.store.engine, _apps(judge_of=lambda a: "j1",
                                      version_of=lambda a: "v2" if a % 2 else "v1",
                                      planted=lambda a: a % 2 == 1))
    run(engine, T0 - 20 * MINUTE, 40)
    causes = _causes(receiver)
    assert "prompt_version=v2" in causes
    assert not any("judge_model" in cause for cause in causes)
