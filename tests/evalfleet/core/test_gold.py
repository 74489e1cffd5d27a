"""Gold files: the shipped sets, and hostile records reported by line, id and field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalfleet.core.canary import canary_series
from evalfleet.core.gold import bundled_gold, load_gold
from evalfleet.core.metric import load_registry
from evalfleet.core.scales import score_scales

BUILT_IN = ["rag_qa", "context_precision", "bbh_match", "rec_faithfulness",
            "agent_task_completion", "agent_tool_use", "conversation_goal_completion",
            "conversation_faithfulness", "user_frustration"]


@pytest.mark.parametrize("name", BUILT_IN)
def test_every_built_in_metric_ships_a_clean_gold_set(name: str) -> None:
    metric = load_registry().get(name)
    items, errors = load_gold(bundled_gold(name), metric=metric)
    assert errors == []
    assert len(items) >= 12
    labelled = {score for item in items for score in item.labels}
    assert labelled and labelled <= set(metric.spec.scores)
    # Both sides of every labelled score are present: agreement can be measured.
    for score in labelled:
        assert len({item.labels[score] for item in items if score in item.labels}) >= 2


def test_score_scales_follow_the_output_spec() -> None:
    registry = load_registry()
    bbh = score_scales(registry.get("bbh_match"))
    assert bbh["correct"].kind == "binary"
    assert (bbh["reasoning"].kind, bbh["reasoning"].categories) == (
        "ordinal", (1.0, 2.0, 3.0, 4.0, 5.0))
    assert score_scales(registry.get("rag_qa"))["faithfulness"].kind == "continuous"
    assert score_scales(registry.get("rec_faithfulness"))["faithfulness"].kind == "ordinal"


def test_unknown_metric_has_no_shipped_gold() -> None:
    with pytest.raises(FileNotFoundError, match="tone"):
        bundled_gold("tone")


GOOD = {"id": "g1", "input": "q", "output": "a", "reference": "(A)", "labels": {"correct": True}}


@pytest.mark.parametrize(("line", "field", "words"), [
    ("{not json", None, "not JSON"),
    ("[1, 2]", None, "expected a JSON object"),
    (json.dumps({**GOOD, "labels": None}), "labels", "expected an object of scores"),
    (json.dumps({**GOOD, "labels": {}}), "labels", "expected an object of scores"),
    (json.dumps({**GOOD, "labels": {"correct": 1}}), "labels.correct", "expected true or false"),
    (json.dumps({**GOOD, "labels": {"reasoning": 6}}), "labels.reasoning", "outside 1..5"),
    (json.dumps({**GOOD, "labels": {"reasoning": 2.5}}), "labels.reasoning",
     "not one of the rubric's values"),
    (json.dumps({**GOOD, "labels": {"reasoning": "4"}}), "labels.reasoning", "expected a number"),
    (json.dumps({**GOOD, "labels": {"tone": 1}}), "labels.tone", "not a score of this metric"),
    ('{"id": "g1", "input": "q", "labels": {"reasoning": 1e999}}', "labels.reasoning",
     "expected a number"),
    (json.dumps({**GOOD, "id": 5}), "id", ""),
    ("[" * 100_000, None, ""),
])
def test_bad_records_are_reported_and_the_rest_kept(tmp_path: Path, line: str,
                                                    field: str | None, words: str) -> None:
    path = tmp_path / "gold.jsonl"
    good = [json.dumps({**GOOD, "id": f"ok-{n}"}) for n in range(2)]
    path.write_text("\n".join([good[0], line, "", good[1]]) + "\n")
    items, errors = load_gold(path, metric=load_registry().get("bbh_match"))
    assert [item.sample.id for item in items] == ["ok-0", "ok-1"]
    (error,) = errors
    assert error.record == "gold.jsonl: line 2"
    assert error.field == field
    assert words in str(error)


def test_a_duplicate_id_is_reported(tmp_path: Path) -> None:
    record: dict[str, Any] = {**GOOD}
    path = tmp_path / "gold.jsonl"
    path.write_text(json.dumps(record) + "\n" + json.dumps(record) + "\n")
    items, errors = load_gold(path, metric=load_registry().get("bbh_match"))
    assert len(items) == 1
    assert [(e.record, e.field) for e in errors] == [("gold.jsonl: line 2", "id")]


@pytest.mark.parametrize(("metric", "raw", "labels", "expected"), [
    ("bbh_match", {"correct": True}, {"correct": 1.0},
     {"canary:correct": 1.0, "canary_bias:correct": 0.0}),
    ("bbh_match", {"correct": False}, {"correct": 1.0},
     {"canary:correct": 0.0, "canary_bias:correct": -1.0}),
    ("bbh_match", {"correct": True, "reasoning": 5}, {"reasoning": 2.0},
     {"canary:reasoning": 0.25, "canary_bias:reasoning": 0.75}),
    ("rag_qa", {"faithfulness": 0.5}, {"faithfulness": 1.0},
     {"canary:faithfulness": 0.5, "canary_bias:faithfulness": -0.5}),
    # Nothing to compare: a null score, an unlabelled one, text, a label of no score.
    ("rag_qa", {"faithfulness": None, "answer_relevance": 0.3}, {"faithfulness": 1.0}, {}),
    ("rag_qa", {"faithfulness": "N/A"}, {"faithfulness": 1.0}, {}),
    ("rag_qa", {"faithfulness": float("nan")}, {"faithfulness": 1.0}, {}),
    ("rag_qa", {"nonsense": 0.3}, {"nonsense": 1.0}, {}),
])
def test_canary_series_are_agreement_and_bias_with_the_label(
        metric: str, raw: dict[str, object], labels: dict[str, float],
        expected: dict[str, float]) -> None:
    scales = score_scales(load_registry().get(metric))
    assert canary_series(raw, labels, scales=scales) == pytest.approx(expected)
