"""Evidence in every firing notification: the window's worst samples, bounded and escaped.

Payloads are checked against Alertmanager's v2 API (``postableAlerts`` in its
``api/v2/openapi.yaml``) and its webhook format (version 4), written here as JSON Schema.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import httpx
import jsonschema
import pytest

from evalfleet.alerts import AlertEngine
from evalfleet.alerts.evidence import REASON_CHARS, plain_text
from evalfleet.alerts.notifier import SlackNotifier, WebhookNotifier
from evalfleet.alerts.notifier.slack import slack_message
from evalfleet.store import VerdictKey, VerdictRecord, open_store
from tests.evalfleet.alerts import stream
from tests.evalfleet.alerts.conftest import BOTH_DATABASES
from tests.evalfleet.alerts.notifier.test_webhook import notification
from tests.evalfleet.alerts.receiver import Receiver
from tests.evalfleet.alerts.test_engine import DROP_RULE, MINUTE, T0, history, run

_LABEL_SET = {"type": "object", "additionalProperties": {"type": "string"}}

#: Alertmanager v2 ``postableAlerts``.
POSTABLE_ALERTS = {
    "type": "array", "items": {
        "type": "object", "required": ["labels"],
        "properties": {"labels": _LABEL_SET, "annotations": _LABEL_SET,
                       "startsAt": {"type": "string", "format": "date-time"},
                       "endsAt": {"type": "string", "format": "date-time"},
                       "generatorURL": {"type": "string", "format": "uri"}},
        "additionalProperties": False,
    },
}

#: Alertmanager's webhook body, version 4.
WEBHOOK = {
    "type": "object",
    "required": ["version", "groupKey", "truncatedAlerts", "status", "receiver", "groupLabels",
                 "commonLabels", "commonAnnotations", "externalURL", "alerts"],
    "properties": {
        "version": {"const": "4"}, "groupKey": {"type": "string"},
        "truncatedAlerts": {"type": "integer"}, "status": {"enum": ["firing", "resolved"]},
        "receiver": {"type": "string"}, "groupLabels": _LABEL_SET,
        "commonLabels": _LABEL_SET, "commonAnnotations": _LABEL_SET,
        "externalURL": {"type": "string"},
        "alerts": {"type": "array", "items": {
            "type": "object",
            "required": ["status", "labels", "annotations", "startsAt", "endsAt",
                         "generatorURL", "fingerprint"],
            "properties": {"status": {"enum": ["firing", "resolved"]}, "labels": _LABEL_SET,
                           "annotations": _LABEL_SET,
                           "startsAt": {"type": "string", "format": "date-time"},
                           "endsAt": {"type": "string", "format": "date-time"},
                           "generatorURL": {"type": "string", "format": "uri"},
                           "fingerprint": {"type": "string"}}}},
    },
}

HOSTILE = ("<!channel> <@U123> <http://evil.example|click here> & *bold* "
           "\x1b[31mred\x1b[0m \u202eevil\u202c " + "x" * 5000)


def validate(instance: Any, schema: dict[str, Any]) -> None:
    jsonschema.validate(instance, schema, format_checker=jsonschema.FormatChecker())


def context(n: int) -> list[str]:
    """Worst sample n's retrieved context: none, two hostile chunks, or seven chunks."""
    return [[], [f"CHUNK-{n}-1 <script>alert(1)</script> " + HOSTILE, f"CHUNK-{n}-2"],
            [f"CHUNK-{n}-{c}" for c in range(1, 8)]][n]


#: Worst sample 0 is an agent's run whose judge named its second step as where it went wrong.
AGENT_RUN = {"steps": [
    {"type": "model", "output": [{"role": "assistant", "tool_calls": [
        {"id": "c1", "name": "weather", "arguments": {"city": "Olso"}}]}]},
    {"type": "tool", "name": "weather", "call_id": "c1", "arguments": {"city": "Olso"},
     "result": f"no such city {HOSTILE[:60]}"}], "final_answer": "It is sunny."}


#: Worst sample 1 is a conversation's version.
CONVERSATION = {"id": "conv-7", "closed_by": "final_wait", "turns": [
    {"trace_id": "a" * 32, "input": "q"},
    {"trace_id": "b" * 32, "input": "And tomorrow? " + HOSTILE, "output": "rain"}]}


def plant_worst(url: str) -> None:
    """Three verdicts with the lowest scores of the drop window, with hostile reasons; the
    first an agent's run with the step its judge named."""
    store = open_store(url)
    records = [VerdictRecord(
        key=VerdictKey(f"worst-{n}", "rag_qa", "p1", "judge"), status="ok", error_class=None,
        error=None, reason=f"case {n}: " + HOSTILE, scores={"faithfulness": value},
        raw_scores={"faithfulness": value}, raw_output="{}", attempts=1, latency_ms=1,
        prompt_tokens=None, completion_tokens=None, attributes={"app": "support-bot"},
        sample_ts=T0 + n * MINUTE, created_at=T0 + n * MINUTE,
        sample={"input": "q", "output": HOSTILE, "context": context(n), "reference": None,
                "fields": {}, **({"trajectory": AGENT_RUN} if n == 0 else {}),
                **({"session": CONVERSATION} if n == 1 else {})},
        failed_step=2 if n == 0 else None) for n, value in enumerate([0.02, 0.0, 0.01])]
    # A conversation's version closed when idle, not yet final: no evidence until it is.
    records.append(replace(records[1], key=VerdictKey("provisional-0", "rag_qa", "p1", "judge"),
                           provisional=True))
    store.save(verdicts=records, owner="t")
    store.close()


@pytest.mark.parametrize("alert_database", BOTH_DATABASES, indirect=True)
def test_firing_alerts_carry_their_worst_samples_and_a_link(
    open_engine: Callable[..., AlertEngine], receiver: Receiver, alert_database: str,
) -> None:
    engine = open_engine(DROP_RULE, alert_external_url="http://ui.example:8500/")
    drop = stream.steady(start=T0, minutes=20, per_minute=20, mean=0.70, seed=2,
                         attributes={"app": "support-bot"})
    stream.write(engine.store.engine, history(T0) + drop)
    plant_worst(alert_database)
    run(engine, T0 - 5 * MINUTE, 16)
    posted = [request.json for request in receiver.requests]
    for body in posted:
        validate(body, POSTABLE_ALERTS)
    alert = next(a for body in posted for a in body if a["labels"].get("app") == "support-bot")
    notes = alert["annotations"]
    worst = [notes[f"worst_sample_{n}"] for n in (1, 2, 3)]
    assert [line.split(" ")[:2] for line in worst] == [
        ["0", "worst-1:"], ["0.01", "worst-2:"], ["0.02", "worst-0"]]
    # The agent's run says where it went wrong: the step's number and kind, no sample text.
    assert worst[2].startswith("0.02 worst-0 at step 2, tool call weather: case 0: ")
    assert worst[0].startswith("0 worst-1: case 1: <!channel>")  # plain text; Slack escapes
    assert "worst_sample_4" not in notes
    for line in worst:
        assert "\x1b" not in line and "\u202e" not in line
        assert len(line) <= REASON_CHARS + 40 + len(" at step 2, tool call weather")
    assert {"window_n", "window_mean", "baseline_n", "baseline_mean"} <= set(notes)
    assert alert["generatorURL"] == (
        "http://ui.example:8500/alerts/faithfulness_drop?segment=app%3Dsupport-bot")
    assert len(repr(alert)) < 8000  # bounded, whatever the samples hold


def test_markup_in_samples_cannot_break_a_slack_message(receiver: Receiver) -> None:
    annotations = {"summary": "drop in <!here> & co", "description": HOSTILE[:300],
                   "worst_sample_1": "0.1 id-<!channel>: " + HOSTILE[:200],
                   "worst_sample_2": "0.2 id-2: <http://evil.example|click>"}
    note = notification(annotations=annotations,
                        labels={"alertname": "drop", "app": "<!everyone>&"})
    message = slack_message(note)
    section = message["blocks"][0]["text"]["text"]
    # The only control sequence left is our own link; everything else is entities.
    assert re.findall(r"<[^>]*>", section) == ["<http://grafana/d/x?var-rule=drop|Open the alert>"]
    assert "&lt;!channel&gt;" in section and "&lt;http://evil.example|click&gt;" in section
    assert "<" not in message["text"] and "<" not in message["blocks"][1]["elements"][0]["text"]
    assert "&lt;!everyone&gt;&amp;" in message["blocks"][1]["elements"][0]["text"]
    SlackNotifier(name="chat", url=receiver.url, client=httpx.Client(timeout=5)).send(note)
    assert receiver.requests[0].json == message


def test_slack_sections_stay_within_slacks_limit() -> None:
    note = notification(annotations={"summary": "s", "description": "&" * 10_000})
    text = slack_message(note)["blocks"][0]["text"]["text"]
    assert len(text) <= 3000 and text.endswith("…")
    assert re.search(r"&(?!amp;)", text.replace("&lt;", "").replace("&gt;", "")) is None


def test_webhook_payload_with_evidence_is_alertmanagers_format(receiver: Receiver) -> None:
    note = notification(annotations={"summary": "s", "worst_sample_1": "0.1 id: <b>why</b>"})
    WebhookNotifier(name="hook", url=receiver.url, client=httpx.Client(timeout=5), secret="s",
                    external_url="http://ui").send(note)
    body = receiver.requests[0].json
    validate(body, WEBHOOK)
    assert body["alerts"][0]["annotations"]["worst_sample_1"] == "0.1 id: <b>why</b>"


@pytest.mark.parametrize("text,limit,expected", [
    ("plain", 10, "plain"),
    ("a\x1b[31mred\x1b[0m b", 20, "ared b"),
    ("title\x1b]0;pwned\x07 ok", 20, "title ok"),
    ("line\nbreak\ttab\r\x00nul", 40, "line break tab nul"),
    ("\u202eevil\u202c", 10, "evil"),
    ("x" * 50, 10, "x" * 9 + "…"),
    (None, 10, ""),
])
def test_plain_text(text: str | None, limit: int, expected: str) -> None:
    assert plain_text(text, limit=limit) == expected


def test_plain_text_cost_is_bounded_by_the_limit() -> None:
    assert len(plain_text("\x1b[" * 1_000_000, limit=50)) <= 50


def test_secrets_never_reach_the_evidence() -> None:
    from evalfleet.alerts.evidence import evidence_details
    from evalfleet.store.queries.evidence import Evidence

    item = Evidence(verdict_id=1, sample_id="id", value=0.1,
                    reason="the key sk-live-123 leaked", sample_ts=T0 + timedelta(0),
                    attributes={}, sample=None)
    (detail,) = evidence_details([item], secrets=["sk-live-123"])
    assert "sk-live-123" not in detail["explanation"]
