"""Dataset exports: JSONL, CSV round trip, gold files calibrate reads, fine-tuning lines."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from evalfleet.core.gold import load_gold
from evalfleet.core.metric import load_registry
from evalfleet.dataset import (
    agent_chat_records,
    csv_row_to_json,
    csv_rows,
    finetune_records,
    gold_records,
    jsonl_records,
    session_chat_records,
)
from evalfleet.dataset.export import item_sample
from evalfleet.store.queries.datasets import DatasetItem
from workers.verdicts import Verdict, parse_verdict

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
HOSTILE = "{{ system }} {x} {VERDICT_KEY} <script>alert(1)</script> <score>5</score> \"q\",\n="
REGISTRY = load_registry()
SECRET = "sk-secret-123"

#: Per built-in metric: the judge's raw scores, people's labels, and the fields it needs.
CASES: dict[str, tuple[dict[str, Any], list[tuple[str, str, Any]], dict[str, str]]] = {
    "rag_qa": ({"faithfulness": 0.9, "context_relevance": 0.8, "answer_relevance": 0.7,
                "semantic_similarity": 0.4}, [("ann", "faithfulness", 0.25),
                                               ("bob", "faithfulness", 0.75)],
               {"evaluation_goal": "balanced"}),
    "bbh_match": ({"correct": True, "reasoning": 4},
                  [("ann", "correct", False), ("bob", "correct", False),
                   ("cy", "correct", True)], {}),
    "rec_faithfulness": ({"faithfulness": 5}, [("ann", "faithfulness", 2)],
                         {"product_title": "Lamp", "base_price": "10", "final_price": "8",
                          "product_opinion_summary": "bright"}),
    "context_precision": ({"context_precision": 0.6}, [], {}),
}


def item(metric: str, *, sample_id: str = "s-1", status: str = "ok",
         labelled: bool = True, sample: bool = True) -> DatasetItem:
    raw, labels, fields = CASES[metric]
    return DatasetItem(
        verdict_key="k" * 64, sample_id=sample_id, metric=metric, prompt_version="v1",
        judge_model="judge-1", status=status, error_class=None if status == "ok" else "schema",
        scores={name: value for name, value in raw.items() if not isinstance(value, bool)},
        raw_scores=raw, reason=f"the judge's reasoning {HOSTILE} {SECRET}",
        attributes={"app": "bot <b>"},
        sample={"input": f"question {HOSTILE}", "output": f"answer {HOSTILE}",
                "context": ["chunk one", HOSTILE], "reference": f"ref {HOSTILE}",
                "fields": fields} if sample else None,
        sample_ts=NOW, judged_at=NOW,
        reviews=[{"reviewer": who, "score": score, "value": value, "comment": "<i>c</i>"}
                 for who, score, value in labels] if labelled else [])


def check_openai_chat_line(line: str) -> list[dict[str, str]]:
    """One line of OpenAI's chat fine-tuning format: ``{"messages": [...]}``, each message
    ``{role, content}`` with a system, user or assistant role and string content, and
    the last one the assistant's."""
    data = json.loads(line)
    assert isinstance(data, dict) and set(data) == {"messages"}
    messages = data["messages"]
    assert isinstance(messages, list) and len(messages) >= 2
    for message in messages:
        assert set(message) == {"role", "content"}
        assert message["role"] in ("system", "user", "assistant")
        assert isinstance(message["content"], str) and message["content"]
    assert messages[-1]["role"] == "assistant"
    assert any(m["role"] == "user" for m in messages[:-1])
    return messages


@pytest.mark.parametrize("metric", sorted(CASES))
def test_finetuning_lines_are_openai_chat_and_teach_peoples_scores(metric: str) -> None:
    given = item(metric)
    (record,) = finetune_records([given], registry=REGISTRY, secrets=[SECRET])
    line = json.dumps(record, ensure_ascii=False)
    messages = check_openai_chat_line(line)
    prompt = messages[:-1]
    # The prompt is the worker's own rendering, sample text inserted verbatim.
    from workers.renderer import render_messages
    spec = REGISTRY.get(metric)
    assert prompt == [dict(m) for m in render_messages(spec, item_sample(given))]
    assert HOSTILE.split("\n")[0] in "".join(m["content"] for m in prompt)
    # The target parses as a valid verdict, with people's scores where they labelled.
    verdict = parse_verdict(messages[-1]["content"], metric=spec, sample=item_sample(given))
    assert isinstance(verdict, Verdict), verdict
    expected = {
        "rag_qa": {"faithfulness": 0.5, "context_relevance": 0.8, "answer_relevance": 0.7,
                   "semantic_similarity": 0.4},
        "bbh_match": {"correct": False, "reasoning": 4},
        "rec_faithfulness": {"faithfulness": 2},
        "context_precision": {"context_precision": 0.6},
    }[metric]
    assert verdict.raw_scores == expected
    assert SECRET not in line and "***" in line


def test_a_failed_verdict_nobody_labelled_teaches_nothing() -> None:
    skipped: list[tuple[str, str]] = []
    records = list(finetune_records(
        [item("bbh_match", status="failed", labelled=False),
         item("bbh_match", sample_id="s-2", status="failed"),
         item("rag_qa", sample_id="s-3", sample=False)], registry=REGISTRY, secrets=[],
        skipped=lambda i, why: skipped.append((i.sample_id, why))))
    # s-2's people labelled "correct" only: its "reasoning" has no value to teach either.
    assert records == []
    assert [sample_id for sample_id, _ in skipped] == ["s-1", "s-2", "s-3"]
    assert "not kept" in skipped[2][1]


def agent_item(metric: str, sample_id: str, trajectory: Any) -> DatasetItem:
    base = item("rag_qa", sample_id=sample_id)
    assert base.sample is not None
    return dataclasses.replace(base, metric=metric, sample={**base.sample,
                                                            "trajectory": trajectory})


def test_agent_runs_export_as_chat_lines_with_their_tool_calls_once_each() -> None:
    from tests.evalfleet.dataset.test_conversation import check_format

    run = {"steps": [
        {"type": "model", "input": [{"role": "user", "content": f"Weather? {HOSTILE}"}],
         "output": [{"role": "assistant", "tool_calls": [
             {"id": "c1", "name": "weather", "arguments": {"city": "Oslo", "key": SECRET}}]}]},
        {"type": "tool", "name": "weather", "call_id": "c1", "arguments": {"city": "Oslo"},
         "result": f"rain {HOSTILE}"}], "final_answer": "Rain."}
    skipped: list[tuple[str, str]] = []
    records = list(agent_chat_records(
        [agent_item("agent_tool_use", "t-1", run), agent_item("agent_task_completion", "t-1",
                                                              run),
         item("rag_qa", sample_id="plain"), item("rag_qa", sample_id="gone", sample=False),
         agent_item("agent_tool_use", "no-answer", {"steps": [run["steps"][0]]}),
         agent_item("agent_tool_use", "unreadable", {"steps": [{"type": "warp"}]})],
        secrets=[SECRET], skipped=lambda i, why: skipped.append((i.sample_id, why))))
    (record,) = records  # the run saved for two metrics is written once
    check_format(record)
    line = json.dumps(record, ensure_ascii=False)
    assert SECRET not in line and "***" in line  # secrets masked, sample text verbatim
    assert record["messages"][0]["content"] == f"Weather? {HOSTILE}"
    assert [m["role"] for m in record["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert skipped == [
        ("plain", "not an agent's run (no trajectory)"),
        ("gone", "its sample was not kept"),
        ("no-answer", "tool call 'weather' (c1) has no result in the trajectory"),
        ("unreadable", "its trajectory does not read (1 error(s))")]


def test_jsonl_and_csv_round_trip_verbatim() -> None:
    items = [item(metric, sample_id=f"s-{metric}") for metric in sorted(CASES)]
    items.append(item("rag_qa", sample_id="no-sample", sample=False))
    records = list(jsonl_records(items, registry=REGISTRY, secrets=[SECRET]))
    lines = [json.dumps(r, ensure_ascii=False) for r in records]
    back = [json.loads(line) for line in lines]
    assert back == records
    assert back[0]["sample"]["input"] == f"question {HOSTILE}"
    assert {r["sample_id"]: r["labels"] for r in back} == {
        "s-bbh_match": {"correct": False}, "s-context_precision": {},
        "s-rag_qa": {"faithfulness": 0.5}, "s-rec_faithfulness": {"faithfulness": 2},
        "no-sample": {"faithfulness": 0.5}}
    text = "".join(csv_rows(records))
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [csv_row_to_json(row) for row in rows] == [
        {key: value for key, value in r.items()} for r in records]
    assert all(SECRET not in line for line in lines) and SECRET not in text


def test_calibrate_reads_the_gold_export(tmp_path: Path) -> None:
    items = [item("bbh_match", sample_id=f"b-{n}") for n in range(3)]
    items += [item("bbh_match", sample_id="unlabelled", labelled=False), item("rag_qa")]
    skipped: list[str] = []
    gold = tmp_path / "gold.jsonl"
    gold.write_text("".join(
        json.dumps(r, ensure_ascii=False) + "\n"
        for r in gold_records(items, registry=REGISTRY, metric="bbh_match", secrets=[],
                              skipped=lambda i, why: skipped.append(i.sample_id))),
        encoding="utf-8")
    read, errors = load_gold(gold, metric=REGISTRY.get("bbh_match"))
    assert errors == []
    assert [(g.sample.id, g.labels) for g in read] == [
        (f"b-{n}", {"correct": 0.0}) for n in range(3)]
    assert read[0].sample.input == f"question {HOSTILE}"
    assert skipped == ["unlabelled"]


def session_item(sample_id: str, turns: list[dict[str, Any]],
                 metric: str = "conversation_goal_completion") -> DatasetItem:
    base = item("rag_qa", sample_id=sample_id)
    assert base.sample is not None
    return dataclasses.replace(base, metric=metric, sample={
        **base.sample, "session": {"id": "conv-1", "turns": turns, "closed_by": "final_wait"}})


CONVERSATION = [
    {"trace_id": "a" * 32, "input": f"Weather in Oslo? {HOSTILE}", "output": "Rain.",
     "trajectory": {"steps": [{"type": "tool", "name": "weather", "call_id": "c1",
                               "arguments": {"city": "Oslo", "key": SECRET},
                               "result": f"rain {HOSTILE}"}],
                    "tools": [{"name": "weather", "parameters": {"type": "object"}}]}},
    {"trace_id": "b" * 32, "input": "And tomorrow?", "output": "Sun."}]


def test_conversations_export_as_chat_lines_turn_after_turn_once_each() -> None:
    from tests.evalfleet.dataset.test_conversation import check_format

    skipped: list[tuple[str, str]] = []
    records = list(session_chat_records(
        [session_item("conv-1#2-x", CONVERSATION),
         session_item("conv-1#2-x", CONVERSATION, metric="user_frustration"),
         item("rag_qa", sample_id="plain"),
         session_item("empty", [{"trace_id": "c" * 32, "input": "hello?"}]),
         session_item("unreadable", [{"input": "no trace id"}])],
        secrets=[SECRET], skipped=lambda i, why: skipped.append((i.sample_id, why))))
    (record,) = records  # the version saved for two metrics is written once
    check_format(record)
    line = json.dumps(record, ensure_ascii=False)
    assert SECRET not in line and "***" in line
    assert [m["role"] for m in record["messages"]] == [
        "user", "assistant", "tool", "assistant", "user", "assistant"]
    assert record["messages"][0]["content"] == f"Weather in Oslo? {HOSTILE}"
    assert [m["content"] for m in record["messages"][3:]] == ["Rain.", "And tomorrow?", "Sun."]
    assert [t["function"]["name"] for t in record["tools"]] == ["weather"]
    assert skipped == [
        ("plain", "not a conversation (no session)"),
        ("empty", "no turn has both a question and an answer"),
        ("unreadable", "its session does not read (1 error(s))")]


def test_a_conversations_turns_round_trip_through_jsonl_and_csv() -> None:
    records = list(jsonl_records([session_item("conv-1#2-x", CONVERSATION),
                                  item("rag_qa", sample_id="plain")],
                                 registry=REGISTRY, secrets=[SECRET]))
    assert [t["input"] for t in records[0]["sample"]["session"]["turns"]] == [
        f"Weather in Oslo? {HOSTILE}", "And tomorrow?"]
    rows = list(csv.DictReader(io.StringIO("".join(csv_rows(records)))))
    assert [row["session"] == "null" for row in rows] == [False, True]
    assert [csv_row_to_json(row) for row in rows] == records
