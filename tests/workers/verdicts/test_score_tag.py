"""Score-tag verdicts (seed 003): which tags count, ambiguity, truncation, the reason."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.workers.verdicts.builders import metric, sample
from workers.renderer import render_messages
from workers.verdicts.result import ParseFailure, Verdict
from workers.verdicts.score_tag import parse_score_tag


def parse(text: str) -> Verdict | ParseFailure:
    return parse_score_tag(text, metric=metric("rec_faithfulness"), sample=sample())


def raw(text: str) -> object:
    result = parse(text)
    assert isinstance(result, Verdict), result
    return result.raw_scores["faithfulness"]


def failure(text: str) -> ParseFailure:
    result = parse(text)
    assert isinstance(result, ParseFailure), result
    return result


def test_the_whole_rendered_prompt_holds_no_score() -> None:
    # A judge that echoes its whole prompt has not scored anything: every tag in
    # the prompt is a rubric line, an example or a placeholder.
    (message,) = render_messages(metric("rec_faithfulness"), sample())
    result = failure(message["content"])
    assert result.error_class == "no_verdict"
    assert "outside text quoted from the prompt" in result.message


def test_echoed_prompt_then_a_score() -> None:
    (message,) = render_messages(metric("rec_faithfulness"), sample())
    assert raw(message["content"] + "\nOne claim is unverified.\nScore- <score>4</score>") == 4


@pytest.mark.parametrize(("text", "value"), [
    ("Score- <score>1</score>", 1),
    ("Score- <score>5</score>", 5),
    ("score-<score>3</score>", 3),
    ("Final Score: <score>2</score>", 2),
    ("Score \u2013 <score>2</score>", 2),
    ("Score- <score>\n 4 \n</score>", 4),
    ("Score- <score>4/5</score>", 4),
    ("Score- <score>\uff15</score>", 5),
    ("I rate it <score>3</score> overall.", 3),
    ("'Fine'. Score- <score>4</score>", 4),
])
def test_accepted_tags(text: str, value: int) -> None:
    assert raw(text) == value


@pytest.mark.parametrize("quoted", [
    "`<score>5</score>`",
    "```\nScore- <score>5</score>\n```",
    '"<score>5</score>"',
    "'<score>5</score>'",
    "\u201cScore- <score>5</score>\u201d",
    'The rule "assign <score>5</score> when all is verified" applies.',
    "<score>5</score> - Every piece of information is verifiable.",
    "> <score>5</score> - Every piece of information is verifiable.",
    "only e.g Score- <score>5</score>.",
    "for example: <score>5</score>",
    "in the format: Score- <score>5</score>",
    "<score></score>",
    "<score>N</score>",
])
def test_quoted_tags_do_not_count(quoted: str) -> None:
    assert failure(quoted).error_class == "no_verdict"
    assert raw(f"{quoted}\nMy verdict: Score- <score>2</score>") == 2


def test_a_labelled_score_line_that_continues_is_still_a_score() -> None:
    assert raw("Score- <score>4</score> - one claim is unverified.") == 4


def test_labelled_tags_win_and_must_agree() -> None:
    assert raw("<score>1</score> is harsh, <score>5</score> kind. Score: <score>3</score>") == 3
    result = failure("Score- <score>3</score>, Score- <score>4</score>, Score- <score>3</score>")
    assert result.error_class == "ambiguous"
    assert result.message == "the reply gives different scores: 3 and 4"


def test_a_non_numeric_labelled_tag_makes_the_reply_ambiguous() -> None:
    result = failure("Score- <score>4 of 5</score> Score- <score>4</score>")
    assert result.error_class == "ambiguous"


def test_a_lone_non_numeric_tag_is_a_schema_failure() -> None:
    result = failure("Score- <score>4 of 5</score>")
    assert result.error_class == "schema"
    assert result.message == "field 'score': \"4 of 5\" is not a number"


@pytest.mark.parametrize("text", [
    "Score- <score>4", "Score- <score>", "Score- <score>4</", "Score- <score>4</sc",
    "Score- <score>4</score>\nRevised: Score- <score>", "Score- <", "Score- <s",
])
def test_replies_that_end_inside_a_tag_are_truncated(text: str) -> None:
    assert failure(text).error_class == "truncated"


def test_a_stray_less_than_sign_is_not_truncation() -> None:
    assert failure("The price is < 100").error_class == "no_verdict"


def test_reason_is_the_visible_text_before_the_final_tag() -> None:
    result = parse("<think>draft</think>  Step 1.\nStep 2.\n**Score:** <score>4</score>\nThanks!")
    assert isinstance(result, Verdict)
    assert result.reason == "Step 1.\nStep 2."
    assert result.scores == {"faithfulness": 0.75}


def test_no_text_before_the_tag_means_no_reason() -> None:
    result = parse("Score- <score>4</score>")
    assert isinstance(result, Verdict)
    assert result.reason is None


def test_metric_without_a_label_counts_every_tag() -> None:
    bundled = metric("rec_faithfulness")
    output = bundled.spec.output.model_copy(update={"label": None})
    unlabelled = replace(bundled, spec=bundled.spec.model_copy(update={"output": output}))
    result = parse_score_tag(
        "<score>2</score> seems low. Score- <score>4</score>", metric=unlabelled, sample=sample(),
    )
    assert isinstance(result, ParseFailure) and result.error_class == "ambiguous"
