"""Slack and webhook receivers hear of an incident once: one message when it opens, naming
its segments, its cause and the detector's evidence, and one when its last segment
resolves; Alertmanager still gets each segment's alert with the ``incident`` label to
group by. Through the engine, Postgres and a real HTTP receiver."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from evalfleet.alerts import AlertEngine
from evalfleet.alerts.incident_alert import IncidentChange, incident_changes
from evalfleet.alerts.notifier import verify_signature
from tests.evalfleet.alerts import stream
from tests.evalfleet.alerts.receiver import Receiver
from tests.evalfleet.alerts.test_sequential import MINUTE, RULE, T0, run

SECRET = "incident-secret"
PLANTED = {"app": "app0", "prompt_version": "v2"}


def test_incident_changes_open_renotify_and_close() -> None:
    a, b, c = ({"key": k} for k in "abc")
    changes = incident_changes(before={"a": a, "b": b}, after={"b": b, "c": c},
                               renotified={"b", "c"})
    assert changes == [IncidentChange("a", "resolved", a), IncidentChange("b", "renotify", b),
                       IncidentChange("c", "firing", c)]
    assert incident_changes(before={"a": a}, after={"a": a}, renotified=set()) == []


def test_slack_and_webhook_get_one_firing_and_one_resolve_per_incident(
    open_engine: Callable[..., AlertEngine], receiver: Receiver,
) -> None:
    receivers = {"chat": {"type": "slack", "url": receiver.url + "/slack", "default": True},
                 "hook": {"type": "webhook", "url": receiver.url + "/hook", "default": True}}
    rule = {**RULE, "segment_by": ["app", "prompt_version"], "max_segments": 20}
    engine = open_engine(rule, document={"receivers": receivers},
                         alert_webhook_secret=SECRET)
    points = []
    for app in range(3):
        for version in ("v1", "v2"):
            labels = {"app": f"app{app}", "prompt_version": version}
            planted = labels == PLANTED
            points += stream.steady(
                start=T0 - timedelta(hours=2, minutes=30), minutes=210, per_minute=20,
                seed=app * 7 + (version == "v2"), attributes=labels,
                mean=lambda ts, p=planted: 0.55 if p and T0 <= ts < T0 + 20 * MINUTE
                else 0.85)
    stream.write(engine.store.engine, points)
    reports = run(engine, T0 - 10 * MINUTE, 70)
    fired = {segment for report in reports for _, segment, event in report.events
             if event == "firing"}
    resolved = {segment for report in reports for _, segment, event in report.events
                if event == "resolved"}
    assert "app=app0,prompt_version=v2" in fired and fired == resolved, (fired, resolved)
    assert fired <= {"(all)", "app=app0", "app=app0,prompt_version=v2"}

    slack = [r.json for r in receiver.accepted if r.path == "/slack"]
    assert [m["text"].split("]")[0] for m in slack] == ["[FIRING", "[RESOLVED"], slack
    opened = slack[0]["blocks"][0]["text"]["text"]
    assert "app=app0,prompt_version=v2 explains" in opened
    assert "app=app0,prompt_version=v2" in opened.split("firing:")[1]
    assert "e-detector (baseline): e-value" in opened and "drop" in opened and "since" in opened

    hooks = [r for r in receiver.accepted if r.path == "/hook"]
    assert [h.json["status"] for h in hooks] == ["firing", "resolved"]
    for request in hooks:
        assert verify_signature(SECRET.encode(), timestamp=request.headers[
            "x-evalfleet-timestamp"], body=request.body,
            signature=request.headers["x-evalfleet-signature"])
    first, last = (h.json for h in hooks)
    key = first["groupLabels"]["incident"]
    assert last["groupLabels"]["incident"] == key
    notes = first["alerts"][0]["annotations"]
    assert notes["incident_cause"] == "app=app0,prompt_version=v2"
    assert set(notes["incident_segments"].split(", ")) <= fired
    assert "app=app0,prompt_version=v2" in notes["incident_segments"]
    assert float(notes["baseline_e_value"]) >= float(notes["baseline_alarm_level"])
    low, high = (float(v) for v in notes["baseline_drop_interval"].strip("[]").split(","))
    assert low < high and notes["baseline_change_started_at"]
    # The resolve comes when the last segment resolved, not before.
    last_resolved = max(r.at for r in reports for *_, e in r.events if e == "resolved")
    assert last["alerts"][0]["endsAt"] == last_resolved.isoformat().replace("+00:00", "Z")

    # Alertmanager groups by itself: every segment's alert, each with the incident label.
    segments = receiver.alerts()
    assert {a["annotations"]["segment"] for a in segments} == fired
    assert {a["labels"]["incident"] for a in segments} == {key}
