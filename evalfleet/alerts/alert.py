"""The alert a notification carries, in Alertmanager's v2 shape. Pure.

Labels identify the alert and route it (rule, metric, score, severity, segment
attributes, the rule's own labels); they never hold numbers, which would make
every evaluation a new alert. Numbers go in annotations.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

from evalfleet.alerts.evidence import EVIDENCE_SAMPLES
from evalfleet.alerts.incident import cause_line
from evalfleet.alerts.judgecheck import check_line
from evalfleet.alerts.rule import Rule
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.state import AlertState, Event
from evalfleet.core.durations import format_duration

#: Suffix of the alert name that says a rule's traffic stopped.
NO_DATA_SUFFIX = "_no_data"


def build_alert(
    *, rule: Rule, segment: Segment, event: Event, state: AlertState,
    details: dict[str, Any], at: datetime, external_url: str,
) -> dict[str, Any]:
    """The alert for one notification.

    Args:
        rule: The rule.
        segment: The segment.
        event: What is notified.
        state: The state after the transition.
        details: The evaluation's numbers (``detector.finding_details``).
        at: The evaluation time.
        external_url: Where people look at alerts (the dashboard).

    Returns:
        ``{"status", "labels", "annotations", "startsAt", "endsAt", "generatorURL"}``.
    """
    spec = rule.spec
    no_data = event in ("no_data", "data_back")
    labels = {
        "alertname": spec.name + (NO_DATA_SUFFIX if no_data else ""),
        "metric": spec.metric, "score": spec.score, "severity": spec.severity,
        **spec.labels, **segment.as_dict(),
    }
    incident = details.get("incident")
    if isinstance(incident, dict) and not no_data:
        # Alertmanager groups a sequential rule's alerts of one cause by this label.
        labels.setdefault("incident", str(incident.get("key") or incident.get("head")))
    resolved = event in ("resolved", "data_back")
    started = (state.since if event == "no_data" else state.fired_at) or at
    # A firing alert stays up in Alertmanager until the next renotify is overdue, so it
    # neither expires between notifications nor lingers if the engine stops.
    ends = at if resolved else at + spec.renotify + 2 * spec.interval
    if resolved and no_data:
        started = min(started, at)
    return {
        "status": "resolved" if resolved else "firing",
        "labels": labels,
        "annotations": _annotations(rule, segment, details, no_data=no_data),
        "startsAt": format_time(started),
        "endsAt": format_time(max(ends, started)),
        "generatorURL": alert_page_url(external_url, rule=spec.name, segment=segment),
    }


def alert_page_url(external_url: str, *, rule: str, segment: Segment) -> str:
    """The alert's page on ``evalfleet ui`` served at ``external_url``."""
    return (f"{external_url.rstrip('/')}/alerts/{quote(rule, safe='')}?"
            + urlencode({"segment": str(segment)}))


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC with a ``Z``, as Alertmanager writes it."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _annotations(rule: Rule, segment: Segment, details: dict[str, Any], *,
                 no_data: bool) -> dict[str, str]:
    spec = rule.spec
    values = _template_values(rule, segment, details)
    extra = {k: str(v) for k, v in (spec.annotations.model_extra or {}).items()}
    annotations = {
        key: _fill(text, values) for key, text in extra.items()
    }
    if no_data:
        annotations["summary"] = _fill(
            "{rule}: no {score} scores of {metric} in the last {window}", values)
    else:
        annotations["summary"] = _fill(spec.annotations.summary, values)
    annotations["description"] = _describe(details, values, no_data=no_data)
    suspicion = details.get("judge_drift")
    if suspicion:
        annotations["judge_drift"] = drift_line(suspicion)
        annotations["description"] = f"{annotations['judge_drift']}. {annotations['description']}"
    check = details.get("judge_check")
    if check and not no_data:
        # Whether people's labels confirm the drop: a word to route on, and a line to read.
        annotations["judge_check"] = str(check.get("verdict"))
        annotations["judge_check_detail"] = check_line(check)
        annotations["description"] = f"{annotations['description']}. {check_line(check)}"
    if details.get("note"):
        annotations["baseline_source"] = str(details["note"])
    if spec.annotations.runbook:
        annotations["runbook_url"] = spec.annotations.runbook
    annotations["segment"] = str(segment)
    annotations["score_kind"] = rule.score_kind
    for name in ("n", "mean", "baseline_n", "baseline_mean", "baseline_segment"):
        if details.get(name) is not None:
            annotations[f"window_{name}" if name in ("n", "mean") else name] = _text(
                details[name])
    for test in details.get("tests", []):
        prefix = test["against"]
        for name in ("test", "p_value", "q_value", "effect", "bound"):
            if test.get(name) is not None:
                annotations[f"{prefix}_{name}"] = _text(test[name])
        if test.get("interval"):
            annotations[f"{prefix}_wilson_interval"] = _interval(test["interval"])
        if test.get("baseline_interval"):
            annotations["baseline_wilson_interval"] = _interval(test["baseline_interval"])
    if spec.threshold is not None:
        annotations["threshold"] = _text(spec.threshold)
    annotations.update(sequential_annotations(details.get("sequential")))
    if isinstance(incident := details.get("incident"), dict) and not no_data:
        annotations["incident_cause"] = str(incident.get("cause"))
        annotations["incident_detail"] = cause_line(incident)
        annotations["description"] = f"{cause_line(incident)}. {annotations['description']}"
    for number, item in enumerate(details.get("evidence", [])[:EVIDENCE_SAMPLES], start=1):
        annotations[f"worst_sample_{number}"] = evidence_line(item)
    return annotations


#: What an app alert says while a judge_drift rule fires on its metric.
JUDGE_DRIFT_SUSPECTED = "judge drift suspected"


def drift_line(suspicion: dict[str, Any]) -> str:
    """The judge drift suspected on an app alert's metric, as one line of plain text.

    Args:
        suspicion: ``{"rules": [{"rule", "score", "since"}], "identities": [...]}`` as
            the engine stores it with the alert's numbers.

    Returns:
        ``judge drift suspected: <rule> firing since <time> (...); the judge reported
        <model> / <fingerprint> (n verdicts) ...``.
    """
    rules = ", ".join(f"{item.get('rule')} ({item.get('score')}) firing since "
                      f"{item.get('since')}" for item in suspicion.get("rules", []))
    line = f"{JUDGE_DRIFT_SUSPECTED}: {rules}"
    identities = suspicion.get("identities") or []
    if len(identities) > 1:
        seen = "; ".join(f"{i.get('reported_model') or '?'} / {i.get('fingerprint') or '?'} "
                         f"({i.get('verdicts')} verdicts from {i.get('first_at')})"
                         for i in identities)
        line += f"; judge identity changed in the window: {seen}"
    return line


def evidence_line(item: dict[str, Any]) -> str:
    """One worst sample as one line of plain text: score, sample id, for an agent the
    step the judge named (``at step 3, tool call weather``), the judge's why."""
    line = f"{_text(item.get('score'))} {item.get('sample_id', '')}"
    if item.get("failed_step") is not None:
        line += f" at step {item['failed_step']}" + (f", {item['step']}" if item.get("step")
                                                     else "")
    return line + (f": {item['explanation']}" if item.get("explanation") else "")


def _template_values(rule: Rule, segment: Segment, details: dict[str, Any]) -> dict[str, str]:
    spec = rule.spec
    tests = details.get("tests", [])
    best = min(tests, key=lambda t: t["p_value"]) if tests else {}
    return {
        "rule": spec.name, "metric": spec.metric, "score": spec.score,
        "direction": spec.direction, "segment": str(segment),
        "window": format_duration(spec.window), "threshold": _text(spec.threshold),
        "n": _text(details.get("n")), "mean": _text(details.get("mean")),
        "baseline_mean": _text(details.get("baseline_mean")),
        "effect": _text(best.get("effect")), "p_value": _text(best.get("p_value")),
    }


def _describe(details: dict[str, Any], values: dict[str, str], *, no_data: bool) -> str:
    if no_data:
        return f"No verdict with a {values['score']} score arrived for {values['window']}."
    parts = [f"mean {values['mean']} over {values['n']} samples in the last {values['window']}"]
    if details.get("baseline_mean") is not None:
        parts.append(f"baseline {values['baseline_mean']} over {details['baseline_n']}")
    for test in details.get("tests", []):
        parts.append(f"{test['test']}: effect {_text(test['effect'])}, "
                     f"p {_text(test['p_value'])}, q {_text(test['q_value'])}")
    parts += [sequential_line(against, found)
              for against, found in _detectors(details.get("sequential"))]
    return "; ".join(parts)


def sequential_line(against: str, found: dict[str, Any]) -> str:
    """One e-detector's evidence as one line: its e-value and alarm level, the estimated
    drop with its confidence sequence, and since when."""
    line = (f"e-detector ({against}): e-value {_large(found.get('e_value'))} of "
            f"{_large(found.get('alarm_level'))}")
    if found.get("drop") is not None:
        line += f", drop {_text(found['drop'])}"
        if found.get("drop_interval"):
            line += f" {_interval(found['drop_interval'])}"
        line += f" since {found.get('change_started_at')}"
    return line


def sequential_lines(sequential: Any) -> list[str]:
    """A sequential rule's detectors as lines (``alerts show``, the page): each one's
    evidence, then the guarantee it runs under."""
    found = _detectors(sequential)
    if not found:
        return []
    assert isinstance(sequential, dict)
    return [*(sequential_line(against, evidence) for against, evidence in found),
            f"sequential test: a false alarm once in {sequential.get('run_length')} on average "
            f"or less often, all segments of the rule together"]


def detector_lines(finding: dict[str, Any]) -> list[str]:
    """What a sequential rule's numbers say beyond the window and baseline: its detectors
    (:func:`sequential_lines`) and the incident the segment belongs to."""
    lines = sequential_lines(finding.get("sequential"))
    if isinstance(finding.get("incident"), dict):
        lines.append(cause_line(finding["incident"]))
    return lines


def _detectors(sequential: Any) -> list[tuple[str, dict[str, Any]]]:
    if not isinstance(sequential, dict):
        return []
    return [(name, sequential[name]) for name in ("baseline", "threshold")
            if isinstance(sequential.get(name), dict)]


def sequential_annotations(sequential: Any) -> dict[str, str]:
    """A sequential rule's detectors as annotations: the test, its run length, and each
    detector's e-value, alarm level, drop, drop interval and change start."""
    found = _detectors(sequential)
    if not found:
        return {}
    assert isinstance(sequential, dict)
    annotations = {"test": "sequential", "run_length": str(sequential.get("run_length"))}
    for against, evidence in found:
        for name in ("e_value", "alarm_level"):
            annotations[f"{against}_{name}"] = _large(evidence.get(name))
        for name in ("drop", "change_started_at"):
            if evidence.get(name) is not None:
                annotations[f"{against}_{name}"] = _text(evidence[name])
        if evidence.get("drop_interval"):
            annotations[f"{against}_drop_interval"] = _interval(evidence["drop_interval"])
    return annotations


def _fill(template: str, values: dict[str, str]) -> str:
    try:
        return template.format_map(_Blank(values))
    except (ValueError, AttributeError, IndexError, KeyError):
        return template


class _Blank(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _text(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return "n/a"
        return f"{value:.3g}" if abs(value) < 1e-3 and value != 0 else f"{value:.4f}".rstrip(
            "0").rstrip(".") or "0"
    return str(value)


def _large(value: Any) -> str:
    """An e-value: three significant digits at any size."""
    if isinstance(value, int | float) and math.isfinite(value):
        return f"{value:.3g}"
    return "n/a"


def _interval(bounds: Any) -> str:
    low, high = bounds
    return f"[{_text(float(low))}, {_text(float(high))}]"
