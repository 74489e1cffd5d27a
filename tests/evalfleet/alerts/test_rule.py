"""Loading alert rules: the shipped defaults, score kinds, and clear errors at load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from evalfleet.alerts.rule import ReceiverSpec, load_rules
from evalfleet.core.errors import InvalidAlertRule
from evalfleet.core.metric import load_registry

REGISTRY = load_registry()


def load(tmp_path: Path, document: dict[str, Any]) -> Any:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(document))
    return load_rules(path, registry=REGISTRY)


SESSION_METRICS = {"conversation_goal_completion", "conversation_faithfulness",
                   "user_frustration"}


def rule(**fields: Any) -> dict[str, Any]:
    return {"name": "r", "metric": "rag_qa", "score": "faithfulness", **fields}


def test_the_shipped_rules_cover_the_call_agent_and_session_metrics_with_their_score_kinds(
) -> None:
    rules = load_rules(None, registry=REGISTRY)
    kinds = {(r.spec.metric, r.spec.score): r.score_kind
             for r in rules.rules if r.spec.kind == "app"}
    assert kinds == {
        ("rag_qa", "faithfulness"): "continuous",
        ("context_precision", "context_precision"): "continuous",
        ("bbh_match", "correct"): "binary",
        ("rec_faithfulness", "faithfulness"): "ordinal",
        ("agent_task_completion", "task_completion"): "continuous",
        ("agent_tool_use", "tool_use"): "continuous",
        ("conversation_goal_completion", "goal_completion"): "continuous",
        ("conversation_faithfulness", "conversation_faithfulness"): "continuous",
        ("user_frustration", "no_frustration"): "continuous",
    }
    # Session verdicts count once final, after their sample time: whole windows read
    # them, a sequential detector would have read past them.
    assert {r.spec.test for r in rules.rules
            if r.spec.metric in SESSION_METRICS and r.spec.kind == "app"} == {"fixed"}
    pinned = next(r for r in rules.rules if r.spec.metric == "rec_faithfulness")
    assert pinned.spec.segment_keys == ("prompt_version", "app")


def test_the_shipped_rules_watch_each_metrics_judge_on_its_gold_labels() -> None:
    drift = {(r.spec.metric, r.spec.series, r.score_kind) for r in load_rules(
        None, registry=REGISTRY).rules if r.spec.kind == "judge_drift"}
    assert drift == {
        ("rag_qa", "canary:faithfulness", "continuous"),
        ("context_precision", "canary:context_precision", "continuous"),
        ("bbh_match", "canary:correct", "binary"),  # agreement is a proportion
        ("rec_faithfulness", "canary:faithfulness", "continuous"),  # 1 - |judge - label| / 4
        ("agent_task_completion", "canary:task_completion", "continuous"),
        ("agent_tool_use", "canary:tool_use", "continuous"),
        ("conversation_goal_completion", "canary:goal_completion", "continuous"),
        ("conversation_faithfulness", "canary:conversation_faithfulness", "continuous"),
        ("user_frustration", "canary:no_frustration", "continuous"),
    }


def test_a_judge_drift_rule_ignores_the_app_defaults_it_cannot_use(tmp_path: Path) -> None:
    rules = load(tmp_path, {
        "defaults": {"segment_by": ["app"], "filters": {"app": "bot"}, "window": "2h",
                     "baseline": {"type": "trailing", "window": "1d"}},
        "rules": [rule(kind="judge_drift", mode="baseline")]})
    (drift,) = rules.rules
    assert (drift.spec.segment_by, drift.spec.filters, drift.spec.baseline.type) == (
        (), {}, "calibration")
    assert drift.spec.window.total_seconds() == 7200  # the rest is inherited
    assert drift.spec.bias_series == "canary_bias:faithfulness"


@pytest.mark.parametrize(("fields", "field", "words"), [
    ({"kind": "judge_drift", "segment_by": ["app"]}, None, "no 'segment_by'"),
    ({"kind": "judge_drift", "baseline": {"type": "trailing"}}, None, "'calibration' baseline"),
    ({"baseline": {"type": "calibration"}}, None, "'calibration' baseline"),
    ({"kind": "drift"}, "kind", "'app', 'judge_drift' or 'review_agreement'"),
    ({"kind": "review_agreement", "segment_by": ["app"]}, None, "split by judge model"),
    ({"kind": "review_agreement", "baseline": {"type": "pinned", "key": "app",
                                               "value": "a"}}, None, "is 'trailing'"),
    ({"kind": "review_agreement", "direction": "increase"}, None, "agreement falling"),
])
def test_bad_judge_drift_rules_are_named(tmp_path: Path, fields: dict[str, Any],
                                         field: str | None, words: str) -> None:
    with pytest.raises(InvalidAlertRule, match=words) as caught:
        load(tmp_path, {"rules": [rule(**fields)]})
    assert caught.value.field == field


def test_defaults_merge_and_durations_parse(tmp_path: Path) -> None:
    rules = load(tmp_path, {"defaults": {"window": "15m", "for": 2},
                            "rules": [rule(), rule(name="s", window=600)]})
    first, second = rules.rules
    assert first.spec.window.total_seconds() == 900 and first.spec.for_count == 2
    assert second.spec.window.total_seconds() == 600


def test_rules_without_receivers_use_the_default_ones(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"rules": [rule(), rule(name="s", receivers=["hook"])],
                                    "receivers": {"hook": {"type": "slack",
                                                           "url": "http://x/y"}}}))
    extra = {"alertmanager": ReceiverSpec(type="alertmanager", url="http://am:9093",
                                          default=True)}
    rules = load_rules(path, registry=REGISTRY, extra_receivers=extra)
    assert rules.receivers_of(rules.rules[0]) == ("alertmanager",)
    assert rules.receivers_of(rules.rules[1]) == ("hook",)


@pytest.mark.parametrize("fields,message", [
    ({"metric": "nope"}, "unknown metric 'nope'"),
    ({"score": "nope"}, "has no score 'nope'"),
    ({"window": "ten minutes"}, "not a duration"),
    ({"mode": "threshold"}, "needs a 'threshold'"),
    ({"direction": "down"}, "field 'direction'"),
    ({"threshold": 1.5, "mode": "both"}, "field 'threshold'"),
    ({"segment_by": ["app", "app"]}, "names a key twice"),
    ({"segment_by": ["bad key"]}, "field 'segment_by.0'"),
    ({"labels": {"severity": "x"}}, "set by the engine"),
    ({"receivers": ["pager"]}, "unknown receiver 'pager'"),
    ({"renotify": "10s", "interval": "1m"}, "at least one 'interval'"),
    ({"min_samples": 1}, "field 'min_samples'"),
    ({"baseline": {"type": "pinned", "key": "prompt_version"}}, "field 'baseline.pinned.value'"),
    ({"unknown_field": 1}, "field 'unknown_field'"),
    ({"metric": "bbh_match", "score": "correct", "mode": "threshold", "threshold": 1.0},
     "strictly between 0 and 1"),
])
def test_invalid_rules_are_named_with_their_field(tmp_path: Path, fields: dict[str, Any],
                                                  message: str) -> None:
    with pytest.raises(InvalidAlertRule) as caught:
        load(tmp_path, {"rules": [rule(name="broken", **fields)]})
    assert "rule 'broken'" in str(caught.value)
    assert message in str(caught.value)


def test_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidAlertRule, match="cannot read"):
        load_rules(tmp_path / "missing.yaml", registry=REGISTRY)
    (tmp_path / "bad.yaml").write_text("rules: [\n")
    with pytest.raises(InvalidAlertRule, match="not valid YAML"):
        load_rules(tmp_path / "bad.yaml", registry=REGISTRY)
    with pytest.raises(InvalidAlertRule, match="false_discovery_rate"):
        load(tmp_path, {"false_discovery_rate": 0.9, "rules": [rule()]})
    with pytest.raises(InvalidAlertRule, match="a rule of this name comes earlier"):
        load(tmp_path, {"rules": [rule(), rule()]})
