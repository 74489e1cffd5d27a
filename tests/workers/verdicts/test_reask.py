"""reask_prompt: says what was wrong and restates the exact format, never the sample."""

from __future__ import annotations

import pytest

from tests.workers.verdicts.builders import cp, metric, sample
from workers.verdicts import ParseFailure, parse_verdict, reask_prompt

MARKER = "SAMPLE-TEXT-7f3a"


def failure_for(name: str, reply: str, **kwargs: str | None) -> ParseFailure:
    marked = sample(
        input=MARKER, output=MARKER, context=[MARKER], reference=MARKER,
        fields={key: MARKER for key in ("product_title", "base_price", "final_price",
                                        "product_opinion_summary")},
    )
    result = parse_verdict(reply, metric=metric(name), sample=marked, **kwargs)
    assert isinstance(result, ParseFailure)
    return result


def test_schema_failure_is_quoted_and_the_keys_restated() -> None:
    failure = failure_for("context_precision", cp(context_precision_score="1.3"))
    prompt = reask_prompt(failure, metric=metric("context_precision"))
    assert prompt == (
        "Your previous reply did not match the required verdict format.\n"
        "Problem: field 'context_precision_score': 1.3 is above the maximum 1.0.\n"
        "\n"
        "Reply with exactly one JSON object and nothing else: no code fence, no text before "
        "or after it. It has these keys:\n"
        '- "context_precision_score": a number from 0.0 to 1.0\n'
        '- "reason": a string'
    )


def test_bbh_format_lists_types_ranges_and_enums() -> None:
    failure = failure_for("bbh_match", "no verdict")
    prompt = reask_prompt(failure, metric=metric("bbh_match"))
    for line in (
        '- "id": the id from the request, unchanged',
        '- "is_correct": true or false',
        '- "extracted_answer": a string, or null',
        '- "reasoning_score": a whole number from 1 to 5',
        '- "error_type": one of "none", "format_error", "hallucination", "wrong_logic", '
        '"no_answer"',
        '- "comment": a string, or null',
    ):
        assert line in prompt.splitlines()


def test_rag_format_explains_null_and_the_declared_failure() -> None:
    prompt = reask_prompt(failure_for("rag_qa", "{}"), metric=metric("rag_qa"))
    assert ('- "semantic_similarity": a number from 0.0 to 1.0, or null exactly when there is '
            "no reference answer") in prompt
    assert ('If the inputs cannot be evaluated, set "evaluation_status" to "failed", explain '
            'why in "reason" or "error", and give null for the scores.') in prompt


def test_score_tag_format() -> None:
    failure = failure_for("rec_faithfulness", "Looks fine to me.")
    prompt = reask_prompt(failure, metric=metric("rec_faithfulness"))
    assert prompt.splitlines() == [
        "Your previous reply did not contain a verdict in the required format.",
        f"Problem: {failure.message}.",
        "",
        "Give your explanation first, then end your reply with the score, once, in exactly "
        "this format:",
        "Score- <score>N</score>",
        "where N is a whole number from 1 to 5.",
    ]


@pytest.mark.parametrize(("name", "reply", "finish_reason", "opening"), [
    ("context_precision", "", None, "Your previous reply contained no verdict."),
    ("context_precision", cp(), "length",
     "Your previous reply was cut off before the verdict was complete."),
    ("rec_faithfulness", "Score- <score>3</score> Score- <score>4</score>", None,
     "Your previous reply contained more than one verdict."),
    ("bbh_match", "nothing", None,
     "Your previous reply did not contain a verdict in the required format."),
])
def test_opening_names_the_problem(
    name: str, reply: str, finish_reason: str | None, opening: str,
) -> None:
    failure = failure_for(name, reply, finish_reason=finish_reason)
    prompt = reask_prompt(failure, metric=metric(name))
    assert prompt.startswith(opening)
    assert f"Problem: {failure.message}." in prompt


def test_truncation_asks_for_a_shorter_reply() -> None:
    failure = failure_for("rec_faithfulness", "Score- <score>4")
    prompt = reask_prompt(failure, metric=metric("rec_faithfulness"))
    assert "Keep your explanation short" in prompt


@pytest.mark.parametrize(("name", "reply"), [
    ("context_precision", '{"context_precision_score": "high", "reason": 3}'),
    ("context_precision", '{"context_precision_score": 0.8, "reason": "x"'),
    ("bbh_match", '{"id": "18", "is_correct": "maybe"}'),
    ("rag_qa", '{"evaluation_status": "unknown"}'),
    ("rag_qa", "<think>all reasoning</think>"),
    ("rec_faithfulness", "Score- <score>9</score>"),
    ("rec_faithfulness", "Score- <score>2</score> Score- <score>5</score>"),
])
def test_no_sample_text_in_the_prompt(name: str, reply: str) -> None:
    prompt = reask_prompt(failure_for(name, reply), metric=metric(name))
    assert MARKER not in prompt


def test_a_value_copied_from_the_sample_is_quoted_short() -> None:
    # A judge may copy sample text into a verdict field; the message quotes at
    # most a short prefix of the offending value, enough to recognise it.
    copied = MARKER + " and then a long tail of copied text " * 5
    failure = failure_for("bbh_match", f'{{"id": "17", "is_correct": "{copied}"}}')
    prompt = reask_prompt(failure, metric=metric("bbh_match"))
    assert copied not in prompt
    assert '"SAMPLE-TEXT-7f3a and then a long tail of..."' in prompt
