"""From summaries to observations: minimum samples, effect sizes, hysteresis, pinned baselines."""

from __future__ import annotations

from typing import Any

import pytest

from evalfleet.alerts.detector import examine, judge, pair_baselines
from evalfleet.alerts.rule import AlertRule, Rule, score_kind
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.statistic import Summary
from evalfleet.core.metric import load_registry

ROOT = Segment()


def make_rule(**fields: Any) -> Rule:
    spec = AlertRule.model_validate({"name": "r", "metric": "rag_qa", "score": "faithfulness",
                                     "min_samples": 10, "min_effect": 0.05, **fields})
    metric = load_registry().get(spec.metric)
    return Rule(spec=spec, kind=score_kind(metric, spec.score))


def spread(mean: float, n: int) -> Summary:
    return Summary.of_values([mean - 0.1, mean + 0.1] * (n // 2))


@pytest.mark.parametrize("current,baseline,observation", [
    (spread(0.70, 200), spread(0.85, 2000), "breach"),
    (spread(0.82, 200), spread(0.85, 2000), "hold"),       # significant, but under min_effect
    (spread(0.845, 200), spread(0.85, 2000), "clear"),
    (spread(0.95, 200), spread(0.85, 2000), "clear"),      # a rise is never a breach
    (spread(0.50, 8), spread(0.85, 2000), "insufficient_data"),
    (spread(0.50, 200), spread(0.85, 4), "insufficient_data"),  # too little baseline
])
def test_observations(current: Summary, baseline: Summary, observation: str) -> None:
    rule = make_rule()
    finding = examine(rule, segment=Segment.of({"app": "a"}), current=current,
                      baseline=(Segment.of({"app": "a"}), baseline), confidence=0.95)
    (judgement,) = judge([(rule, finding)], false_discovery_rate=0.05)
    assert judgement.observation == observation


def test_the_whole_without_samples_is_no_data_a_segment_is_insufficient() -> None:
    rule = make_rule()
    whole = examine(rule, segment=ROOT, current=Summary(n=0), baseline=None, confidence=0.95)
    part = examine(rule, segment=Segment.of({"app": "a"}), current=Summary(n=0), baseline=None,
                   confidence=0.95)
    assert [j.observation for j in judge([(rule, whole), (rule, part)],
                                         false_discovery_rate=0.05)] == [
        "no_data", "insufficient_data"]


def test_p_values_are_adjusted_across_the_whole_cycle() -> None:
    rule = make_rule()
    borderline = spread(0.79, 40)
    findings = [(rule, examine(rule, segment=Segment.of({"app": str(i)}), current=c,
                               baseline=(ROOT, spread(0.85, 400)), confidence=0.95))
                for i, c in enumerate([borderline] + [spread(0.85, 40)] * 99)]
    alone = judge(findings[:1], false_discovery_rate=0.05)[0]
    among_many = judge(findings, false_discovery_rate=0.05)[0]
    assert alone.q_values[0] < among_many.q_values[0]


def test_pinned_previous_compares_each_value_with_the_one_before_it() -> None:
    rule = make_rule(baseline={"type": "pinned", "key": "prompt_version", "value": "previous"},
                     segment_by=["app"])
    def at(ts: float, n: int = 50) -> Summary:
        return Summary(n=n, total=n * 0.8, total_sq=n * 0.65, first_seen_ts=ts)
    v = {name: Segment.of({"prompt_version": name}) for name in ("v1", "v2", "v3")}
    reference = {v["v1"]: at(100), v["v2"]: at(200), v["v3"]: at(300),
                 Segment.of({"prompt_version": "v2", "app": "a"}): at(210)}
    current = {v["v3"]: at(300), v["v1"]: at(100),
               Segment.of({"prompt_version": "v3", "app": "a"}): at(310), ROOT: at(100)}
    paired = pair_baselines(rule, current=current, reference=reference)
    assert paired[v["v3"]][0] == v["v2"]  # type: ignore[index]
    assert paired[Segment.of({"prompt_version": "v3", "app": "a"})][0] == Segment.of(
        {"prompt_version": "v2", "app": "a"})  # type: ignore[index]
    assert paired[v["v1"]] is None and paired[ROOT] is None
    pinned = make_rule(baseline={"type": "pinned", "key": "prompt_version", "value": "v1"})
    paired = pair_baselines(pinned, current=current, reference=reference)
    assert paired[v["v3"]][0] == v["v1"] and paired[v["v1"]] is None  # type: ignore[index]
