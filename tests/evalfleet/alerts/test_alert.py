"""The alert payload: labels identify and route, numbers go in annotations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from evalfleet.alerts.alert import build_alert, drift_line
from evalfleet.alerts.rule import AlertRule, Rule
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.state import AlertState
from evalfleet.core.metric import load_registry

AT = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
DETAILS = {"n": 200, "mean": 0.712, "baseline_n": 4000, "baseline_mean": 0.851,
           "observation": "breach", "tests": [{
               "against": "baseline", "test": "welch_t", "p_value": 1.2e-9, "q_value": 3e-9,
               "effect": 0.139, "statistic": -9.1, "bound": None, "interval": None,
               "baseline_interval": None}]}
RULE = Rule(spec=AlertRule.model_validate({
    "name": "faithfulness_drop", "metric": "rag_qa", "score": "faithfulness",
    "labels": {"team": "support"}, "severity": "page",
    "annotations": {"summary": "{segment} at {mean} (was {baseline_mean})", "runbook": "rb",
                    "dashboard": "grafana/{rule}"}}), score_kind="continuous")


def build(event: str, state: AlertState) -> dict[str, object]:
    return build_alert(rule=RULE, segment=Segment.of({"app": "bot"}), event=event,  # type: ignore[arg-type]
                       state=state, details=DETAILS, at=AT, external_url="http://g/d/q")


def test_firing_alert_labels_and_annotations() -> None:
    alert = build("firing", AlertState("firing", since=AT, fired_at=AT))
    assert alert["labels"] == {"alertname": "faithfulness_drop", "metric": "rag_qa",
                               "score": "faithfulness", "severity": "page", "team": "support",
                               "app": "bot"}
    annotations = alert["annotations"]
    assert annotations["summary"] == "app=bot at 0.712 (was 0.851)"  # type: ignore[index]
    assert annotations["runbook_url"] == "rb" and annotations["dashboard"] == (  # type: ignore[index]
        "grafana/faithfulness_drop")
    assert annotations["baseline_p_value"] == "1.2e-09"  # type: ignore[index]
    assert annotations["window_n"] == "200"  # type: ignore[index]
    assert alert["startsAt"] == "2026-11-21T12:00:00Z"
    assert alert["endsAt"] == "2026-11-21T16:02:00Z"  # renotify (4h) + two intervals
    assert alert["generatorURL"] == "http://g/d/q/alerts/faithfulness_drop?segment=app%3Dbot"
    assert load_registry().get("rag_qa")  # the rule's metric exists


def test_resolved_alert_ends_now_and_no_data_is_its_own_alert() -> None:
    fired = AT - timedelta(minutes=30)
    resolved = build("resolved", AlertState("resolved", since=AT, fired_at=fired))
    assert resolved["status"] == "resolved"
    assert resolved["startsAt"] == "2026-11-21T11:30:00Z"
    assert resolved["endsAt"] == "2026-11-21T12:00:00Z"
    silent = build("no_data", AlertState("no_data", since=AT))
    assert silent["labels"]["alertname"] == "faithfulness_drop_no_data"  # type: ignore[index]
    assert "no faithfulness scores" in silent["annotations"]["summary"]  # type: ignore[index]


def test_an_alert_during_judge_drift_says_so_with_the_judges_identities() -> None:
    suspicion: dict[str, Any] = {"rules": [{"rule": "rag_qa_judge_drift", "score": "faithfulness",
                            "since": "2026-11-21T11:00:00Z"}],
                 "identities": [
                     {"judge_model": "m", "reported_model": "m-0613", "fingerprint": "fp_1",
                      "verdicts": 40, "first_at": "2026-11-21T10:00:00Z"},
                     {"judge_model": "m", "reported_model": "m-0613", "fingerprint": "fp_2",
                      "verdicts": 12, "first_at": "2026-11-21T11:02:00Z"}]}
    alert = build_alert(rule=RULE, segment=Segment(), event="firing",
                        state=AlertState("firing", since=AT, fired_at=AT),
                        details={**DETAILS, "judge_drift": suspicion}, at=AT,
                        external_url="http://g")
    annotations: dict[str, str] = alert["annotations"]
    assert annotations["judge_drift"] == (
        "judge drift suspected: rag_qa_judge_drift (faithfulness) firing since "
        "2026-11-21T11:00:00Z; judge identity changed in the window: m-0613 / fp_1 (40 "
        "verdicts from 2026-11-21T10:00:00Z); m-0613 / fp_2 (12 verdicts from "
        "2026-11-21T11:02:00Z)")
    assert annotations["description"].startswith(annotations["judge_drift"] + ". mean 0.712")
    one = drift_line({**suspicion, "identities": suspicion["identities"][:1]})
    assert one == ("judge drift suspected: rag_qa_judge_drift (faithfulness) firing since "
                   "2026-11-21T11:00:00Z")  # one identity is no change
    plain = build("firing", AlertState("firing", since=AT, fired_at=AT))
    assert "judge_drift" not in plain["annotations"]  # type: ignore[operator]
