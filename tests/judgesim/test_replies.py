"""Reply building: prompt recognition, derived scores, directives applied, usage, prompt keys."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from evalfleet.judgesim import (
    Fault,
    InvalidChatRequest,
    Prompt,
    build_reply,
    estimate_tokens,
    prompt_key,
    recognise_prompt,
    reference_missing,
    simulated_scores,
    simulated_verdict,
)
from tests.judgesim.builders import (
    JSON_OBJECT,
    JSON_SCHEMA,
    Messages,
    digest_slot,
    rendered,
    reply,
    user,
)

RAG_KEYS = {
    "faithfulness", "faithfulness_explanation", "context_relevance",
    "context_relevance_explanation", "answer_relevance", "answer_relevance_explanation",
    "semantic_similarity", "semantic_similarity_explanation", "evaluation_status", "reason",
    "error",
}


@pytest.mark.parametrize(("messages", "response_format", "expected"), [
    (rendered("rag_qa"), None, "rag_qa"),
    (rendered("rag_qa"), JSON_SCHEMA, "rag_qa"),
    (rendered("context_precision"), None, "context_precision"),
    (rendered("bbh_match"), JSON_SCHEMA, "bbh_match"),
    (rendered("rec_faithfulness"), None, "rec_faithfulness"),
    (user("Rate this: Score- <score>N</score>"), None, "rec_faithfulness"),
    (user("BIG-Bench Hard in the user message only"), None, "text"),
    (user("hello"), {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}},
     "json_schema"),
    (user("hello"), JSON_OBJECT, "json_object"),
    (user("hello"), {"type": "text"}, "text"),
    (user("hello"), None, "text"),
])
def test_recognises_the_judge_prompt(messages: Messages, response_format: Any,
                                     expected: str) -> None:
    assert recognise_prompt(messages, response_format=response_format) == expected


@pytest.mark.parametrize(("messages", "slots"), [
    (rendered("context_precision"), {"context_precision_score": 0}),
    (rendered("context_precision", input="Another question?"), {"context_precision_score": 0}),
])
def test_float_scores_come_from_their_own_digest_slot(messages: Messages,
                                                      slots: dict[str, int]) -> None:
    scores = simulated_scores(messages)
    for name, slot in slots.items():
        assert scores[name] == round(digest_slot(messages, slot) / 0xFFFF, 2)


@pytest.mark.parametrize("messages", [rendered("bbh_match"), rendered("bbh_match", id="b-2")])
def test_bbh_reasoning_comes_from_the_digest(messages: Messages) -> None:
    assert simulated_scores(messages)["reasoning_score"] == 1 + digest_slot(messages, 1) % 5


@pytest.mark.parametrize(("output", "reference", "correct"), [
    ("Step by step. Therefore, the answer is (B).", "(B)", True),
    ("Let me work through it step by step, slowly. Therefore, the answer is (B).", "(B)", True),
    ("Step by step. Therefore, the answer is (A).", "(B)", False),
    ("So the statement is False.", "False", True),
    ("So the statement is untrue.", "True", False),
    ("The total is 24 legs.", "24", True),
    ("The total is 124 legs.", "24", False),
    ("I think it is (B).\nWait, no: the answer is (C).", "(B)", False),
])
def test_bbh_correctness_reads_the_final_answer(output: str, reference: str,
                                                correct: bool) -> None:
    messages = rendered("bbh_match", output=output, reference=reference)
    assert simulated_scores(messages)["is_correct"] is correct


@pytest.mark.parametrize("metric", ["rag_qa", "context_precision", "bbh_match",
                                    "rec_faithfulness"])
def test_scores_are_deterministic_and_depend_on_the_prompt(metric: str) -> None:
    first, again = rendered(metric), rendered(metric)
    assert simulated_scores(first) == simulated_scores(again)
    assert reply(first) == reply(again)
    # rag_qa scores follow the answer's overlap with the context; the others its hash.
    context_words = ["Paris", "capital", "France", "city", "river", "Seine"]
    variants = {json.dumps(simulated_scores(rendered(
        metric, output=" ".join([*context_words[:n], f"Answer{n}"]),
        context=[" ".join(context_words)])))
        for n in range(6)}
    assert len(variants) > 1


@pytest.mark.parametrize(("metric", "directive", "expected"), [
    ("rag_qa", "[[judge-sim faithfulness=0.2 answer_relevance=0.9]]",
     {"faithfulness": 0.2, "answer_relevance": 0.9}),
    ("rag_qa", "[[judge-sim semantic_similarity=null]]", {"semantic_similarity": None}),
    ("context_precision", "[[judge-sim context_precision_score=0.05]]",
     {"context_precision_score": 0.05}),
    ("bbh_match", "[[judge-sim is_correct=true reasoning_score=5]]",
     {"is_correct": True, "reasoning_score": 5}),
    ("rec_faithfulness", "[[judge-sim score=1]]", {"score": 1}),
    ("rec_faithfulness", "[[judge-sim faithfulness=2]]", {"score": 2}),
])
def test_directive_in_the_sample_overrides_scores(metric: str, directive: str,
                                                  expected: dict[str, Any]) -> None:
    messages = rendered(metric, output=f"Paris. {directive}")
    scores = simulated_scores(messages)
    assert {key: scores[key] for key in expected} == expected


@pytest.mark.parametrize(("reference", "missing"), [
    (None, True), ("", True), ("   ", True), ("none", True), (" NONE ", True), ("None", True),
    ("Paris", False), ("none of them", False), ("null", False), ("\nParis", False),
])
def test_semantic_similarity_is_null_exactly_when_the_reference_is_missing(
    reference: str | None, missing: bool,
) -> None:
    messages = rendered("rag_qa", reference=reference)
    verdict = simulated_verdict(messages)
    assert set(verdict) == RAG_KEYS
    assert (verdict["semantic_similarity"] is None) is missing
    assert ("No reference answer" in verdict["semantic_similarity_explanation"]) is missing
    assert verdict["evaluation_status"] == "success"
    assert verdict["reason"] is None and verdict["error"] is None
    for name in ("faithfulness", "context_relevance", "answer_relevance"):
        assert 0.0 <= verdict[name] <= 1.0 and verdict[name] == round(verdict[name], 2)
        assert verdict[f"{name}_explanation"]


@pytest.mark.parametrize(("text", "missing"), [
    ("- **Reference Answer**: \n- **Generated Answer**: x", True),
    ("- **Reference Answer**: none\n- **Generated Answer**: x", True),
    ("- **Reference Answer**: a\nb\n- **Generated Answer**: x", False),
    ("- **Reference Answer**: Paris", False),
    ("- **Reference Answer**:", True),
    ("no reference line", True),
])
def test_reference_missing(text: str, missing: bool) -> None:
    assert reference_missing(text) is missing


@pytest.mark.parametrize(("lines", "keys"), [
    ('- `"precision"`: The score between 0.0 and 1.0.\n'
     '- `"why"`: A detailed explanation of why the score was assigned.', ("precision", "why")),
    ("", ("context_precision_score", "reason")),
])
def test_context_precision_keys_come_from_the_prompt(lines: str, keys: tuple[str, str]) -> None:
    messages = user(f'ASSESSING THE "CONTEXT PRECISION" METRIC\n{lines}\nInput: x')
    content, finish_reason = reply(messages, response_format=JSON_OBJECT)
    verdict = json.loads(content)
    assert list(verdict) == list(keys) and finish_reason == "stop"
    assert 0.0 <= verdict[keys[0]] <= 1.0 and isinstance(verdict[keys[1]], str)


@pytest.mark.parametrize("sample_id", ["17", "req-8812", "a b"])
def test_bbh_verdict_echoes_the_id_and_is_consistent(sample_id: str) -> None:
    for n in range(8):
        messages = rendered("bbh_match", id=sample_id, output=f"Thinking {n}.\nSo, True.",
                            reference="True")
        verdict = simulated_verdict(messages)
        assert verdict["id"] == sample_id
        assert set(verdict) == {"id", "is_correct", "extracted_answer", "reasoning_score",
                                "error_type", "comment"}
        assert verdict["reasoning_score"] in range(1, 6)
        if verdict["is_correct"]:
            assert verdict["error_type"] == "none" and verdict["extracted_answer"] == "True"
        else:
            assert verdict["error_type"] in ("format_error", "hallucination", "wrong_logic",
                                             "no_answer")


def test_bbh_reads_blocks_from_the_user_message() -> None:
    text = ("ID: 42\n\nQUESTION:\nIs it?\n\nMODEL_RESPONSE:\n<think>GROUND_TRUTH:\nno</think>"
            "Therefore (B)\n\nGROUND_TRUTH:\n(A)\n[[judge-sim is_correct=false "
            "error_type=wrong_logic]]")
    verdict = simulated_verdict(user(text, system="BIG-Bench Hard judge"))
    assert verdict["id"] == "42"
    assert verdict["is_correct"] is False and verdict["error_type"] == "wrong_logic"
    assert verdict["extracted_answer"] == "Therefore (B)"


def test_bbh_reads_the_sample_from_the_first_user_message_of_a_reask() -> None:
    first = rendered("bbh_match", id="r-9", output="So, True.", reference="True")
    reask = [*first, {"role": "assistant", "content": '{"id": "r-9", "is_correct": "maybe"}'},
             {"role": "user", "content": "GROUND_TRUTH:\nnot this\n[[judge-sim is_correct=true]]"}]
    verdict = simulated_verdict(reask)
    assert verdict["id"] == "r-9" and verdict["extracted_answer"] == "True"



@pytest.mark.parametrize(("messages", "response_format"), [
    (user("hello"), None), (user("hello"), JSON_OBJECT),
])
def test_unrecognised_prompts_get_a_short_reply(messages: Messages, response_format: Any) -> None:
    content, _ = reply(messages, response_format=response_format)
    score = simulated_scores(messages, response_format=response_format)["score"]
    if response_format is None:
        assert len(content) < 200 and str(score) in content
    else:
        assert json.loads(content)["score"] == score


def test_max_tokens_cuts_the_reply() -> None:
    messages = rendered("rag_qa")
    content, finish_reason = reply(messages, response_format=JSON_SCHEMA, max_tokens=10)
    assert finish_reason == "length" and len(content) == 40


@pytest.mark.parametrize(("text", "tokens"), [("", 0), ("a", 1), ("abcd", 1), ("abcde", 2)])
def test_tokens_are_characters_over_four_rounded_up(text: str, tokens: int) -> None:
    assert estimate_tokens(text) == tokens


def test_usage_counts_prompt_and_reply() -> None:
    messages = rendered("rag_qa")
    result = build_reply(Prompt.from_messages(messages), model="m", response_format=None,
                         fault=Fault.none())
    prompt_chars = sum(len(m["content"]) for m in messages)
    assert result.usage.prompt_tokens == -(-prompt_chars // 4)
    assert result.usage.completion_tokens == -(-len(result.content) // 4)
    assert result.usage.total_tokens == result.usage.prompt_tokens + result.usage.completion_tokens


@pytest.mark.parametrize("messages", [
    user("one"), user("two", system="sys"),
    [{"role": "user", "content": [{"type": "text", "text": "par"},
                                  {"type": "text", "text": "ts"}]}],
])
def test_prompt_key_is_sha256_of_the_concatenated_contents(messages: Messages) -> None:
    text = "".join(m["content"] if isinstance(m["content"], str)
                   else "".join(p["text"] for p in m["content"]) for m in messages)
    assert prompt_key(messages) == hashlib.sha256(text.encode()).hexdigest()[:16]


@pytest.mark.parametrize("messages", [
    None, [], "text", [{"content": "no role"}], [{"role": "user", "content": 5}], ["x"],
])
def test_bad_messages_are_rejected(messages: Any) -> None:
    with pytest.raises(InvalidChatRequest):
        Prompt.from_messages(messages)


def test_a_flipping_judge_inverts_yes_no_answers_only() -> None:
    messages = rendered("bbh_match", id="q", output="So, True.", reference="True")
    schema = {"type": "json_object"}
    prompt = Prompt.from_messages(messages)
    plain, flipped = (json.loads(build_reply(prompt, model="m", response_format=schema,
                                             fault=Fault.none(), flip=flip).content)
                      for flip in (False, True))
    assert flipped["is_correct"] is (not plain["is_correct"])
    assert flipped["reasoning_score"] == plain["reasoning_score"]
