"""A verdict's confidence from score-token log-probabilities, or from agreement of samples."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from evalfleet.core.cascade import scores_agree
from tests.workers.verdicts.builders import bbh, cp, metric, rag, sample
from workers.judge.logprobs import MAX_TOKENS, TokenLogprob, read_logprobs
from workers.verdicts import ParseFailure, Verdict, parse_verdict
from workers.verdicts.confidence import (
    agreement_confidences,
    logprob_confidences,
    token_share,
    verdict_confidence,
)

_TOKEN = re.compile(r"\d|[A-Za-z_]+|\s+|.", re.DOTALL)


def tokens_of(text: str, sure: dict[int, float] | None = None) -> dict[str, Any]:
    """A ``logprobs`` object spelling ``text`` one digit, word or sign a token.

    ``sure`` maps a character offset to the probability of the token starting there,
    the rest of the mass going to one alternative; every other token is certain.
    """
    content = []
    for match in _TOKEN.finditer(text):
        probability = (sure or {}).get(match.start(), 1.0)
        top = [{"token": match.group(), "logprob": math.log(probability)}]
        if probability < 1.0:
            top.append({"token": "~", "logprob": math.log(1.0 - probability)})
        content.append({"token": match.group(), "logprob": math.log(probability),
                        "top_logprobs": top})
    return {"content": content}


def verdict(text: str, name: str) -> Verdict:
    # A null semantic similarity is valid only for a sample without a reference.
    reference = None if '"semantic_similarity": null' in text else "The trail running shoe."
    parsed = parse_verdict(text, metric=metric(name), sample=sample(reference=reference))
    assert isinstance(parsed, Verdict), parsed
    return parsed


def confidences(text: str, name: str, sure: dict[str, float]) -> dict[str, float | None]:
    """Confidences with ``sure`` keyed by the substring whose last occurrence is uncertain."""
    offsets = {text.rindex(needle): probability for needle, probability in sure.items()}
    tokens = read_logprobs(tokens_of(text, offsets))
    return logprob_confidences(text, tokens, metric=metric(name), verdict=verdict(text, name))


CP_TEXT = cp(context_precision_score="0.85")
BBH_TEXT = bbh(is_correct="true", reasoning_score="4")
TAG_TEXT = ("Step 1: the rubric says <score>5</score> - every claim is supported.\n"
            "Two claims cannot be verified.\nScore- <score>3</score>")
RAG_TEXT = rag(semantic_similarity="null")


@pytest.mark.parametrize(("text", "name", "sure", "expected"), [
    # A 0..1 number: read up to its first decimal digit; the "5" of 0.85 does not count.
    (CP_TEXT, "context_precision", {"0.85": 0.9}, {"context_precision": 0.9}),
    (CP_TEXT, "context_precision", {"5, ": 0.2}, {"context_precision": 1.0}),
    (CP_TEXT, "context_precision", {"8": 0.5}, {"context_precision": 0.5}),
    # A boolean and a rubric integer, each its own figure.
    (BBH_TEXT, "bbh_match", {"true": 0.7, '4, "error': 0.6}, {"correct": 0.7, "reasoning": 0.6}),
    # The score tag: the last tag with the parsed value, not the rubric line quoted above.
    (TAG_TEXT, "rec_faithfulness", {"3<": 0.55, "5<": 0.1}, {"faithfulness": 0.55}),
    # A null score has a confidence too: the judge's share on writing null.
    (RAG_TEXT, "rag_qa", {"null, \"semantic_similarity_explanation": 0.8, "0.9": 0.95},
     {"faithfulness": 0.95, "context_relevance": 1.0, "answer_relevance": 1.0,
      "semantic_similarity": 0.8}),
])
def test_confidence_per_reply_format(text: str, name: str, sure: dict[str, float],
                                     expected: dict[str, float]) -> None:
    found = confidences(text, name, sure)
    assert found == pytest.approx(expected)
    assert verdict_confidence(found) == pytest.approx(min(expected.values()))


def test_a_value_inside_reasoning_is_not_the_score() -> None:
    text = '<think>"context_precision_score": 0.85 maybe</think>' + CP_TEXT
    found = confidences(text, "context_precision", {"0.85 maybe": 0.1})
    assert found == {"context_precision": pytest.approx(1.0)}


def test_a_value_written_several_times_is_read_at_its_last_place() -> None:
    text = "Draft: " + CP_TEXT + "\nFinal:\n```json\n" + CP_TEXT + "\n```"
    assert confidences(text, "context_precision", {"0.85": 0.6}) == {
        "context_precision": pytest.approx(0.6)}


def test_a_plain_score_line_is_read_after_its_label() -> None:
    text = "No claim is unsupported.\nScore- 5"
    assert confidences(text, "rec_faithfulness", {"5": 0.75}) == {
        "faithfulness": pytest.approx(0.75)}


def test_share_among_alternatives_and_without_them() -> None:
    position = TokenLogprob("4", math.log(0.6), (("4", math.log(0.6)), ("5", math.log(0.2))))
    assert token_share(position) == pytest.approx(0.75)
    assert token_share(TokenLogprob("4", math.log(0.6))) == pytest.approx(0.6)
    assert token_share(TokenLogprob("4", -math.inf, (("5", -math.inf),))) == 0.0


@pytest.mark.parametrize("logprobs", [
    None, {}, {"content": None}, {"content": []}, {"content": "tokens"}, [1, 2],
    {"content": [{"token": "4"}]},
    {"content": [{"token": "4", "logprob": float("nan")}]},
    {"content": [{"token": "4", "logprob": 0.5}]},
    {"content": [{"token": "4", "logprob": True}]},
    {"content": [{"token": 4, "logprob": -0.1}]},
    {"content": [{"token": "4", "logprob": "-0.1"}]},
    {"content": [{"token": "4", "logprob": -0.1, "top_logprobs": "x"}]},
    {"content": [{"token": "4", "logprob": -0.1, "top_logprobs": [{"token": "5"}]}]},
    {"content": [{"token": "4", "logprob": -0.1,
                  "top_logprobs": [{"token": "5", "logprob": float("nan")}]}]},
    {"content": [{"token": "4", "logprob": -0.1}] * (MAX_TOKENS + 1)},
])
def test_malformed_logprobs_read_as_none(logprobs: Any) -> None:
    assert read_logprobs(logprobs) is None


def test_unknown_where_logprobs_are_missing_or_do_not_spell_the_reply() -> None:
    spec, parsed = metric("bbh_match"), verdict(BBH_TEXT, "bbh_match")
    unknown = {"correct": None, "reasoning": None}
    assert logprob_confidences(BBH_TEXT, None, metric=spec, verdict=parsed) == unknown
    other = read_logprobs(tokens_of(BBH_TEXT + " "))
    assert logprob_confidences(BBH_TEXT, other, metric=spec, verdict=parsed) == unknown
    assert verdict_confidence(unknown) is None
    assert verdict_confidence({}) is None


def test_a_long_list_of_alternatives_is_cut_and_small_rounding_is_tolerated() -> None:
    many = [{"token": str(i), "logprob": -10.0} for i in range(10_000)]
    tokens = read_logprobs({"content": [{"token": "4", "logprob": 1e-9, "top_logprobs": many}]})
    assert tokens is not None and len(tokens[0].alternatives) == 20
    assert tokens[0].logprob == 0.0


def test_many_reasoning_blocks_stay_linear() -> None:
    text = "<think>x</think>" * 5_000 + CP_TEXT
    assert confidences(text, "context_precision", {"0.85": 0.9}) == {
        "context_precision": pytest.approx(0.9)}


@pytest.mark.parametrize(("first", "second", "kind", "agree"), [
    (1.0, 1.0, "binary", True), (1.0, 0.0, "binary", False),
    (0.75, 0.75, "ordinal", True), (0.75, 0.5, "ordinal", False),
    (0.8, 0.7, "continuous", True), (0.8, 0.65, "continuous", False),
    (None, None, "continuous", True), (None, 0.5, "continuous", False),
])
def test_agreement_per_score_kind(first: float | None, second: float | None, kind: str,
                                  agree: bool) -> None:
    assert scores_agree(first, second, kind=kind, tolerance=0.1) is agree


def test_agreement_among_samples() -> None:
    kept = verdict(bbh(reasoning_score="4"), "bbh_match")
    other = verdict(bbh(reasoning_score="5"), "bbh_match")
    failed = ParseFailure("schema", "no")
    samples = [kept, kept, other, failed, kept]
    assert agreement_confidences(kept, samples, metric=metric("bbh_match"), tolerance=0.1) == {
        "correct": pytest.approx(0.8), "reasoning": pytest.approx(0.6)}
    assert agreement_confidences(kept, [], metric=metric("bbh_match"), tolerance=0.1) == {
        "correct": None, "reasoning": None}
