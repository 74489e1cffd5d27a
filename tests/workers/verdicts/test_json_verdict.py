"""JSON verdicts: decoding, repair checked against the text, unwrapping, choosing one."""

from __future__ import annotations

import json

import pytest

from tests.workers.verdicts.builders import bbh, cp, metric, sample
from workers.verdicts.json_verdict import MAX_DEPTH, parse_json_verdict
from workers.verdicts.result import ParseFailure, Verdict


def parse(text: str, name: str = "context_precision") -> Verdict | ParseFailure:
    return parse_json_verdict(text, metric=metric(name), sample=sample())


def failure(text: str, name: str = "context_precision") -> ParseFailure:
    result = parse(text, name)
    assert isinstance(result, ParseFailure), result
    return result


def score(text: str, name: str = "context_precision") -> dict[str, float | None]:
    result = parse(text, name)
    assert isinstance(result, Verdict), result
    return result.scores


@pytest.mark.parametrize(("written", "words"), [
    ("4%", "a percentage is only accepted on a 0 to 1 scale"),
    ("4 5", "is not a number"),
    ("4.", None),
    ("+4", None),
])
def test_numbers_from_repair_are_checked_against_the_text(written: str, words: str | None) -> None:
    # The repair library reads `4%` as 4 and `4 5` as 4: neither is what the judge wrote.
    text = bbh(reasoning_score=written, is_correct="True")
    if words is None:
        assert score(text, "bbh_match") == {"correct": 1.0, "reasoning": 0.75}
    else:
        assert words in failure(text, "bbh_match").message


def test_the_message_comes_from_the_candidate_most_like_a_verdict() -> None:
    result = failure(
        '{"context_precision_score": 2, "reason": "x"} then {"note": 1}',
    )
    assert result.message == "field 'context_precision_score': 2 is above the maximum 1.0"
    assert len(result.details) == 2


def test_a_later_candidate_wins_a_tie() -> None:
    result = failure(f"{cp(context_precision_score='3')} {cp(context_precision_score='2')}")
    assert "2 is above" in result.message


def test_invalid_candidates_are_ignored_when_one_is_valid() -> None:
    assert score(f'{{"context_precision_score": "high"}} {cp()}') == {"context_precision": 0.8}


def test_identical_verdicts_in_any_key_order_count_once() -> None:
    other_order = '{"reason": "Close to the expected answer.", "context_precision_score": 0.80}'
    assert score(f"{cp()}\n{other_order}") == {"context_precision": 0.8}


def test_same_score_different_reason_is_ambiguous() -> None:
    other = cp(reason='"Another reason entirely, in more words."')
    result = failure(f"{cp()} {other}")
    assert result.error_class == "ambiguous"
    assert result.message == "the reply holds 2 different verdicts (field 'reason' differs)"


def test_outer_object_that_validates_is_not_unwrapped() -> None:
    text = cp(extra=cp(context_precision_score="0.1"))
    assert score(text) == {"context_precision": 0.8}


def test_two_different_nested_verdicts_are_ambiguous() -> None:
    text = f'{{"first": {cp()}, "second": {cp(context_precision_score="0.2")}}}'
    assert failure(text).error_class == "ambiguous"


def test_nested_single_element_array_unwraps() -> None:
    assert score(f'{{"results": [{cp()}]}}') == {"context_precision": 0.8}


def test_double_encoded_with_escaped_quotes_inside() -> None:
    inner = json.dumps({"context_precision_score": 0.8, "reason": 'He said "yes".'})
    assert score(json.dumps(inner)) == {"context_precision": 0.8}


def test_double_encoded_duplicate_keys_are_caught() -> None:
    inner = '{"context_precision_score": 0.8, "reason": "x", "context_precision_score": 0.4}'
    assert "duplicate key" in failure(json.dumps(inner)).message


def test_nested_duplicate_keys_are_caught() -> None:
    text = '{"verdict": {"context_precision_score": 0.8, "reason": "x", "reason": "y"}}'
    assert failure(text).message == "duplicate key 'reason' with different values"


def test_prose_brackets_are_not_verdict_attempts() -> None:
    result = failure("The model wrote \\boxed{B} and cited [1] and [A].")
    assert result.error_class == "no_verdict"


def test_an_array_of_plain_values_is_not_a_verdict_attempt() -> None:
    assert failure("Scores: [0.8, 0.6]").error_class == "no_verdict"


@pytest.mark.parametrize("text", [
    "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
    '{"a": ' + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "}",  # strict JSON, read without the walk
])
def test_deeply_nested_regions_are_rejected_without_repair(text: str) -> None:
    result = failure(text)
    assert result.error_class == "schema"
    assert "nested more than" in result.message


@pytest.mark.parametrize(("text", "error_class"), [
    ("", "empty"),
    ("<think>only reasoning</think>", "empty"),
    ('{"context_precision_score": 0.8', "truncated"),
    ("no json here", "no_verdict"),
])
def test_failure_classes(text: str, error_class: str) -> None:
    assert failure(text).error_class == error_class


def test_bbh_id_must_match_the_sample_being_judged() -> None:
    result = parse_json_verdict(
        bbh(), metric=metric("bbh_match"), sample=sample(id="other-id"),
    )
    assert isinstance(result, ParseFailure)
    assert result.message == "field 'id': \"17\" does not match the sample id \"other-id\""
