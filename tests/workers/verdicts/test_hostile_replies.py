"""Pathological judge replies: each is read in linear time, never raises, and ends as a
verdict or a failure with its class."""

from __future__ import annotations

import json
import time

import pytest

from tests.workers.verdicts.builders import metric, sample
from workers.judge.reply import TOO_LARGE
from workers.verdicts import ParseFailure, Verdict, parse_verdict

# The linear scan takes 0.1 to 0.4 s on these 100 KB shapes on a busy 2-core machine;
# the ceiling is 50 times that. The quadratic scan it replaced took 0.8 s on 10 KB of
# "[" then "}" and would take over a minute here (python -m bench.hostile_inputs).
CEILING_S = 20.0

N = 50_000


def verdict(n: int) -> str:
    return json.dumps({"faithfulness": (n % 97) / 97, "context_relevance": 0.5,
                       "answer_relevance": 0.5, "semantic_similarity": 0.5,
                       "evaluation_status": "success"})


SHAPES = {
    "[ then }": "[" * N + "}" * N,
    "{ then ]": "{" * N + "]" * N,
    "deep objects": '{"a":' * (N // 3) + "1" + "}" * (N // 3),
    "distinct verdicts": " ".join(verdict(n) for n in range(700)),
    "unclosed strings": '{"a": "' + '" ' * N,
    "think tags": "<think>" * N,
    "escaped quotes": '{\\"a\\": ' * (N // 4),
    "comments": "{" + "/*" * N,
    "nul": '{"faithfulness": 0.5\x00}',
    "deep members": '{"a":' * (N // 10) + "1" + ',"b":1}' * (N // 10),
    "keys around arrays": "{" + "[{" * (N // 4) + "}]" * (N // 4) + ":1}",
}


def timed_parse(reply: str, metric_name: str) -> Verdict | ParseFailure:
    started = time.perf_counter()
    result = parse_verdict(reply, metric=metric(metric_name), sample=sample(),
                           finish_reason="stop")
    assert time.perf_counter() - started < CEILING_S
    assert isinstance(result, Verdict | ParseFailure)
    return result


@pytest.mark.parametrize("reply", list(SHAPES.values()), ids=list(SHAPES))
def test_pathological_json_replies(reply: str) -> None:
    result = timed_parse(reply, "rag_qa")
    if isinstance(result, ParseFailure):
        assert "could not be read" not in result.message  # a class, not a crash


def test_many_distinct_verdicts_are_ambiguous_and_too_many_are_refused() -> None:
    few = " ".join(verdict(n) for n in range(200))
    result = parse_verdict(few, metric=metric("rag_qa"), sample=sample(), finish_reason="stop")
    assert isinstance(result, ParseFailure) and result.error_class == "ambiguous"
    result = parse_verdict(SHAPES["distinct verdicts"], metric=metric("rag_qa"),
                           sample=sample(), finish_reason="stop")
    assert isinstance(result, ParseFailure) and "700 JSON regions" in result.message


@pytest.mark.parametrize("reply", [
    "Score- <score>3</score> " * 20_000, '"' + "<score>4</score> x " * 20_000,
    "<score>" * 50_000, "Score-" + " " * 200_000 + "<scor", "`" + "<score>2</score>`" * 20_000,
], ids=["labelled tags", "one quoted line", "open tags", "label then spaces", "code"])
def test_pathological_score_tag_replies(reply: str) -> None:
    timed_parse(reply, "rec_faithfulness")


def test_a_reply_over_the_size_cap_is_truncated() -> None:
    result = parse_verdict(None, metric=metric("rag_qa"), sample=sample(),
                           finish_reason=TOO_LARGE)
    assert isinstance(result, ParseFailure) and result.error_class == "truncated"
    assert "size cap" in result.message


@pytest.mark.parametrize("tag", ["\u2462", "\u00b3", "\u0663"])
def test_a_score_tag_with_a_digit_that_is_not_ascii_or_full_width_is_no_score(tag: str) -> None:
    result = parse_verdict(f"Fine. Score- <score>{tag}</score>", metric=metric("rec_faithfulness"),
                           sample=sample(), finish_reason="stop")
    assert isinstance(result, ParseFailure)
    full_width = parse_verdict("Fine. Score- <score>\uff14</score>",
                               metric=metric("rec_faithfulness"), sample=sample(),
                               finish_reason="stop")
    assert isinstance(full_width, Verdict) and full_width.raw_scores == {"faithfulness": 4}
