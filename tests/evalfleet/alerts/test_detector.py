"""From summaries to observations: minimum samples, effect sizes, hysteresis, pinned baselines."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from evalfleet.alerts.detector import (
    drift_baseline,
    examine,
    examine_drift,
    finding_details,
    judge,
    pair_baselines,
)
from evalfleet.alerts.rule import AlertRule, Rule
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.statistic import Summary
from evalfleet.core.metric import load_registry
from evalfleet.core.scales import score_kind

ROOT = Segment()


def make_rule(**fields: Any) -> Rule:
    spec = AlertRule.model_validate({"name": "r", "metric": "rag_qa", "score": "faithfulness",
                                     "min_samples": 10, "min_effect": 0.05, **fields})
    metric = load_registry().get(spec.metric)
    return Rule(spec=spec, score_kind=score_kind(metric, spec.score))


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


def drift_rule(score: str = "faithfulness", metric: str = "rag_qa") -> Rule:
    spec = AlertRule.model_validate({"name": "d", "kind": "judge_drift", "metric": metric,
                                     "score": score, "min_samples": 10, "min_effect": 0.1})
    kind = score_kind(load_registry().get(metric), score)
    return Rule(spec=spec, score_kind="binary" if kind == "binary" else "continuous")


def calibration(gold: str = "rag_qa.jsonl", **baseline: Any) -> Any:
    report = {"canary_baseline": baseline} if baseline else {}
    return SimpleNamespace(metric="rag_qa", gold=gold, prompt_version="p1",
                           judge_model="m", created_at="2026-11-25", report=report)


def stored(summary: Summary) -> dict[str, float]:
    return {"n": summary.n, "total": summary.total, "total_sq": summary.total_sq}


STEADY = spread(0.9, 24)
UNBIASED = spread(0.0, 24)
BASELINE = {"faithfulness": {"agreement": stored(STEADY), "bias": stored(UNBIASED)}}


@pytest.mark.parametrize(("runs", "words"), [
    ([], "no calibration run"),
    ([calibration(gold="judge:m")], "no calibration run"),  # a shadow comparison is no gold
    ([calibration()], "no canary summary of 'faithfulness'"),  # calibrated before canaries
    ([calibration(faithfulness={"agreement": {"n": "x"}})], "no canary summary"),
    ([calibration(faithfulness={"agreement": stored(STEADY),
                                "bias": {"n": 3, "total": float("nan"), "total_sq": 1}})],
     "no canary summary"),
])
def test_a_drift_rule_without_a_usable_calibration_says_so_and_never_fires(
        runs: list[Any], words: str) -> None:
    rule = drift_rule()
    baseline = drift_baseline(runs, score="faithfulness")
    assert isinstance(baseline, str) and baseline.startswith("no baseline") and words in baseline
    finding = examine_drift(rule, current=spread(0.1, 40), bias=spread(-0.8, 40),
                            baseline=baseline, confidence=0.95)
    (judgement,) = judge([(rule, finding)], false_discovery_rate=0.05)
    assert (judgement.observation, finding_details(judgement)["note"]) == (
        "insufficient_data", baseline)


@pytest.mark.parametrize(("agreement", "bias", "observation", "breaching"), [
    (spread(0.9, 24), spread(0.0, 24), "clear", set()),
    (spread(0.6, 24), spread(-0.3, 24), "breach", {"baseline", "bias_low"}),  # scores sank
    (spread(0.6, 24), spread(0.3, 24), "breach", {"baseline", "bias_high"}),  # scores rose
    (spread(0.88, 24), spread(0.15, 24), "breach", {"bias_high"}),  # agreement clipped, bias not
    (spread(0.6, 8), spread(-0.3, 8), "insufficient_data", set()),
])
def test_drift_tests_agreement_down_and_bias_both_ways(
        agreement: Summary, bias: Summary, observation: str, breaching: set[str]) -> None:
    rule = drift_rule()
    baseline = drift_baseline([calibration(**BASELINE)], score="faithfulness")
    assert not isinstance(baseline, str)
    finding = examine_drift(rule, current=agreement, bias=bias, baseline=baseline,
                            confidence=0.95)
    (judgement,) = judge([(rule, finding)], false_discovery_rate=0.05)
    assert judgement.observation == observation
    assert {test.against for test, q in zip(finding.tests, judgement.q_values, strict=True)
            if q <= 0.05 and test.effect >= 0.1} == breaching
    assert "calibration of rag_qa on rag_qa.jsonl" in str(finding.note)


def test_binary_canary_agreement_is_a_proportion_test() -> None:
    rule = drift_rule("correct", "bbh_match")
    ones = {"n": 24, "total": 23.0, "total_sq": 23.0}
    baseline = drift_baseline([calibration(correct={
        "agreement": ones, "bias": {"n": 24, "total": 1.0, "total_sq": 1.0}})], score="correct")
    assert not isinstance(baseline, str)
    flipped = Summary.of_values([0.0] * 20 + [1.0] * 4)
    finding = examine_drift(rule, current=flipped, bias=Summary.of_values([-1.0] * 20 + [0] * 4),
                            baseline=baseline, confidence=0.95)
    assert [t.test in ("two_proportion_z", "fisher_exact") for t in finding.tests] == [
        True] * 3  # agreement, and each kind of error as a rate
    (judgement,) = judge([(rule, finding)], false_discovery_rate=0.05)
    assert judgement.observation == "breach"
    high, low = finding.tests[1:]
    assert (high.against, high.effect) == ("bias_high", pytest.approx(-1 / 24))  # fewer yes
    assert (low.against, low.effect) == ("bias_low", pytest.approx(20 / 24))  # many more no


def test_a_yes_no_judge_flawless_at_calibration_is_not_held_to_perfection() -> None:
    rule = drift_rule("correct", "bbh_match")
    perfect = {"n": 24, "total": 24.0, "total_sq": 24.0}
    baseline = drift_baseline([calibration(correct={
        "agreement": perfect, "bias": {"n": 24, "total": 0.0, "total_sq": 0.0}})],
        score="correct")
    assert not isinstance(baseline, str)
    # 5 of 48 wrong, all "no" for a "yes": an error rate 24 clean items cannot rule out.
    finding = examine_drift(rule, current=Summary.of_values([1.0] * 43 + [0.0] * 5),
                            bias=Summary.of_values([0.0] * 43 + [-1.0] * 5),
                            baseline=baseline, confidence=0.95)
    (judgement,) = judge([(rule, finding)], false_discovery_rate=0.05)
    assert judgement.observation != "breach"


def test_the_canaries_judge_is_compared_with_its_own_calibration() -> None:
    current = calibration(**BASELINE)
    candidate = SimpleNamespace(**{**vars(current), "judge_model": "candidate"})
    runs = [candidate, current]  # newest first: a candidate judge was calibrated last
    chosen = drift_baseline(runs, score="faithfulness", judge_models={"m"})
    assert not isinstance(chosen, str) and "judge m" in chosen.source
    # No calibration of the canaries' judge (it was swapped): the last one is the reference.
    swapped = drift_baseline(runs, score="faithfulness", judge_models={"other"})
    assert not isinstance(swapped, str) and "judge candidate" in swapped.source
