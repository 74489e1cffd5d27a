"""Reply text: bare and fenced verdicts, the score tag, malformed kinds, truncation points."""

from __future__ import annotations

import json
from typing import Any

import pytest

from evalfleet.judgesim import (
    MALFORMED_KINDS,
    Fault,
    MalformedKind,
    simulated_scores,
    simulated_verdict,
)
from evalfleet.judgesim.mangle import render_json, render_score_tag, render_text
from tests.judgesim.builders import (
    JSON_OBJECT,
    JSON_SCHEMA,
    SCORE_LINE,
    fenced_json,
    rendered,
    reply,
)


@pytest.mark.parametrize(("response_format", "fenced"), [
    (None, True), ({"type": "text"}, True), (JSON_OBJECT, False), (JSON_SCHEMA, False),
])
@pytest.mark.parametrize("metric", ["rag_qa", "context_precision", "bbh_match"])
def test_json_verdicts_are_bare_in_json_mode_and_fenced_after_prose_in_text_mode(
    metric: str, response_format: Any, fenced: bool,
) -> None:
    messages = rendered(metric)
    content, finish_reason = reply(messages, response_format=response_format)
    verdict = fenced_json(content) if fenced else json.loads(content)
    assert verdict == simulated_verdict(messages) and finish_reason == "stop"
    if fenced:
        prose = content.split("```", 1)[0].strip()
        assert prose.endswith(".") and prose.count(".") == 1


def test_rec_faithfulness_ends_with_the_score_tag() -> None:
    for n in range(6):
        messages = rendered("rec_faithfulness", output=f"Summary {n}.")
        content, finish_reason = reply(messages)
        match = SCORE_LINE.search(content)
        assert match and finish_reason == "stop"
        assert int(match.group(1)) == simulated_scores(messages)["score"]
        assert len(content.splitlines()) >= 3


@pytest.mark.parametrize("kind", MALFORMED_KINDS)
@pytest.mark.parametrize("response_format", [None, JSON_SCHEMA])
@pytest.mark.parametrize("metric", ["rag_qa", "context_precision", "bbh_match"])
def test_malformed_verdicts_are_not_valid_json(metric: str, response_format: Any,
                                               kind: MalformedKind) -> None:
    messages = rendered(metric)
    valid, _ = reply(messages, response_format=response_format)
    content, finish_reason = reply(messages, response_format=response_format,
                                   fault=Fault.malformed(kind))
    assert finish_reason == "stop" and content != valid
    body = content if response_format or kind == "prose_around" else (
        content.split("```json\n", 1)[1].rsplit("\n```", 1)[0])
    with pytest.raises(ValueError):
        json.loads(body)


@pytest.mark.parametrize(("kind", "marker"), [
    ("trailing_comma", ",}"), ("single_quotes", "'faithfulness': "), ("prose_around", "Sure,"),
    ("unescaped_quote", '"yes"'), ("python_literals", "None"), ("missing_brace", None),
])
def test_each_malformed_kind_breaks_the_verdict_its_own_way(kind: MalformedKind,
                                                            marker: str | None) -> None:
    content, _ = reply(rendered("rag_qa"), response_format=JSON_OBJECT,
                       fault=Fault.malformed(kind))
    if marker is None:
        assert content.startswith("{") and not content.endswith("}")
    else:
        assert marker in content


@pytest.mark.parametrize("kind", MALFORMED_KINDS)
def test_malformed_score_tag_has_no_valid_score(kind: MalformedKind) -> None:
    content, finish_reason = reply(rendered("rec_faithfulness"), fault=Fault.malformed(kind))
    assert not SCORE_LINE.search(content) and finish_reason == "stop"


@pytest.mark.parametrize(("metric", "response_format"), [
    ("rag_qa", JSON_SCHEMA), ("rag_qa", None), ("context_precision", JSON_OBJECT),
    ("bbh_match", None), ("rec_faithfulness", None),
])
def test_truncated_reply_is_cut_inside_the_verdict(metric: str, response_format: Any) -> None:
    messages = rendered(metric)
    valid, _ = reply(messages, response_format=response_format)
    content, finish_reason = reply(messages, response_format=response_format,
                                   fault=Fault.truncated())
    assert finish_reason == "length"
    assert valid.startswith(content) and len(content) < len(valid)
    if metric == "rec_faithfulness":
        assert content.endswith("<score>")
    else:
        with pytest.raises(ValueError):
            json.loads(content[content.index("{"):])


@pytest.mark.parametrize("kind", ["python_literals", "unescaped_quote"])
def test_kinds_with_nothing_to_break_fall_back_to_a_trailing_comma(kind: MalformedKind) -> None:
    content, _ = render_json({"score": 0.5}, bare=True, malformed=kind)
    assert content == '{"score": 0.5,}'


@pytest.mark.parametrize("bare", [True, False])
@pytest.mark.parametrize("malformed", [None, *MALFORMED_KINDS])
def test_json_cut_point_falls_inside_the_verdict(bare: bool,
                                                 malformed: MalformedKind | None) -> None:
    content, cut_at = render_json({"score": 0.5, "reason": "Fine."}, bare=bare,
                                  malformed=malformed)
    assert content.find("{") < cut_at < len(content)


@pytest.mark.parametrize("score", [0, 6, 2.5, True, None, "high"])
def test_score_tag_writes_an_out_of_scale_score_as_it_is(score: Any) -> None:
    content, cut_at = render_score_tag(score, None)
    assert content.endswith(f"Score- <score>{score}</score>")
    assert content[:cut_at].endswith("Score- <score>")
    assert "Some pieces" in content and "to some extent" in content


def test_text_reply_names_the_model_and_the_score() -> None:
    content, cut_at = render_text("judge-x", 0.42)
    assert content == "judge-sim (judge-x): no judge prompt recognised; simulated score 0.42."
    assert cut_at == len(content) // 2
