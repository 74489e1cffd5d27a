"""The scan: reasoning blocks, string-aware bracket matching, duplicate keys."""

from __future__ import annotations

import math

import pytest

from workers.verdicts.scan import (
    object_pairs,
    raw_value,
    same_value,
    scan_json,
    scan_strict_object,
    strip_think,
)


@pytest.mark.parametrize(("text", "expected"), [
    ("plain", "plain"),
    ("<think>draft</think>final", "final"),
    ("a<think>x</think>b<think>y</think>c", "abc"),
    ("<THINK>x</Think>kept", "kept"),
    ("< think >x< / think >kept", "kept"),
    ("kept<think>unclosed to the end", "kept"),
    ("reasoning opened by the template</think>kept", "kept"),
    ("x</think>y</think>z", "z"),
    ("<think>only</think>", ""),
    ("no <thinking> tag here", "no <thinking> tag here"),
])
def test_strip_think(text: str, expected: str) -> None:
    assert strip_think(text) == expected


def texts(text: str) -> list[str]:
    return [region.text for region in scan_json(text).regions]


@pytest.mark.parametrize(("text", "expected"), [
    ('{"a": 1}', ['{"a": 1}']),
    ('Here: ```json\n{"a": 1}\n``` done', ['{"a": 1}']),
    ('{"a": 1} and {"b": 2}', ['{"a": 1}', '{"b": 2}']),
    ('{"a": "}{"}', ['{"a": "}{"}']),
    ('{"a": "x \\" } y"}', ['{"a": "x \\" } y"}']),
    ('{"a": "he said "no {" twice", "b": 1}', ['{"a": "he said "no {" twice", "b": 1}']),
    ("{'a': 'it's {fine', 'b': 1}", ["{'a': 'it's {fine', 'b': 1}"]),
    ("{\u201ca\u201d: \u201c} inside\u201d}", ["{\u201ca\u201d: \u201c} inside\u201d}"]),
    ('{"a": [1, {"b": [2]}]}', ['{"a": [1, {"b": [2]}]}']),
    ('{"a": [1, 2}', ['{"a": [1, 2}']),
    ('stray } then {"a": 1}', ['{"a": 1}']),
    ('{"a": 1 // a } comment\n}', ['{"a": 1 // a } comment\n}']),
    ('[1] and [A]', ["[1]", "[A]"]),
    ('"{\\"a\\": 1}"', ['{\\"a\\": 1}']),
    ('<think>{"draft": 1}</think>{"a": 1}', ['{"a": 1}']),
    ('{"draft": 1} then </think>{"a": 1}', ['{"a": 1}']),
    ('{"draft": 1, unclosed </think>{"a": 1}', ['{"a": 1}']),
    ('{"a": "mentions <think> and </think>"}', ['{"a": "mentions <think> and </think>"}']),
])
def test_regions(text: str, expected: list[str]) -> None:
    scan = scan_json(text)
    assert texts(text) == expected
    assert not scan.truncated


@pytest.mark.parametrize("text", [
    '{"a": 1',
    '{"a": "unclosed string}',
    'done {"a": 1} then {"b": ',
    '[{"a": 1}',
    '[A, and then {"a": 1}',
])
def test_unclosed_object_is_truncated(text: str) -> None:
    assert scan_json(text).truncated


def test_unclosed_array_without_objects_is_not_truncated() -> None:
    scan = scan_json('{"a": 1} and the options [A, B')
    assert not scan.truncated
    assert texts('{"a": 1} and the options [A, B') == ['{"a": 1}']


@pytest.mark.parametrize(("text", "visible"), [
    ("", False), ("  \n", False), ("<think>x</think>  ", False), ("<think>x", False),
    ("x", True), ("<think>x</think>y", True), ("{}", True),
])
def test_visible(text: str, visible: bool) -> None:
    assert scan_json(text).visible is visible


def test_regions_in_a_think_block_opened_later_are_ignored() -> None:
    scan = scan_json('{"a": 1} <think>{"a": 2')
    assert texts('{"a": 1} <think>{"a": 2') == ['{"a": 1}']
    assert not scan.truncated


def test_pairs_hold_values_as_written() -> None:
    (region,) = scan_json("{'a': 80%, \"b\": [1, 2], c: 'it's', \"d\": {\"e\": 1}}").regions
    assert region.pairs == {"a": "80%", "b": "[1, 2]", "c": "'it's'", "d": '{"e": 1}'}


def test_pairs_recover_a_missing_comma_between_lines() -> None:
    (region,) = scan_json('{"a": "x"\n "b": 2}').regions
    assert region.pairs == {"a": '"x"', "b": "2"}


@pytest.mark.parametrize(("text", "key"), [
    ('{"a": 1, "a": 2}', "a"),
    ("{'a': 'x', 'a': 'y'}", "a"),
    ('{"a": 1, "b": {"c": true, "c": false}}', "c"),
    ('{"a": 1, "a": true}', "a"),
])
def test_duplicate_keys_with_different_values(text: str, key: str) -> None:
    (region,) = scan_json(text).regions
    assert region.duplicate is not None
    assert region.duplicate.key == key


@pytest.mark.parametrize("text", [
    '{"a": 1, "a": 1}',
    '{"a": 1, "a": 1.0}',
    "{'a': 'x', \"a\": \"x\"}",
    '{"a": 1, "b": {"a": 2}}',
])
def test_repeated_keys_with_the_same_value_are_fine(text: str) -> None:
    (region,) = scan_json(text).regions
    assert region.duplicate is None


def test_depth() -> None:
    (region,) = scan_json('{"a": [{"b": {}}]}').regions
    assert region.depth == 4


def test_object_pairs_reads_the_first_object() -> None:
    assert object_pairs('prose [ {"a": 1, "b": "x"} ]') == {"a": "1", "b": '"x"'}
    assert object_pairs("no object") == {}
    assert object_pairs('{"a": 1') == {}


@pytest.mark.parametrize(("text", "value"), [
    ("0.8", 0.8), ('"x"', "x"), ("'x'", "x"), ("True", True), ("None", None), ("null", None),
    ("80%", "80%"), ("1 // note", 1), ('{"a": 1,}', {"a": 1}),
])
def test_raw_value(text: str, value: object) -> None:
    assert same_value(raw_value(text), value)


@pytest.mark.parametrize(("first", "second", "same"), [
    (1, 1.0, True), (True, 1, False), (False, 0, False), (True, True, True),
    (math.nan, math.nan, False), ("a", "a", True), ("1", 1, False),
    ({"a": [1, 2]}, {"a": [1.0, 2]}, True), ({"a": 1}, {"a": 1, "b": 2}, False),
    ([True], [1], False), (None, None, True),
])
def test_same_value(first: object, second: object, same: bool) -> None:
    assert same_value(first, second) is same


def test_deep_and_long_inputs_scan_in_linear_time() -> None:
    depth = 20_000
    (region,) = scan_json("{" * depth + "}" * depth).regions
    assert region.depth == depth
    assert scan_json("[a " * 20_000).regions == ()
    assert strip_think("</think>{" * 10_000) == "{"


@pytest.mark.parametrize("text", [
    '{"a": 1}',
    '  \n{"score": 0.8, "reason": "fine"}\n\n',
    '{"reason": "<think>not a block</think> and </think>", "score": 1}',
    '{"reason": "a \\"quoted\\" word, braces }{ and [", "score": 0}',
    '{"reason": "it\'s \u201csmart\u201d // not a comment /* nor this */"}',
    '{"a": [{"b": {"c": [[]]}}], "d": {}}',
    '{"a": NaN, "b": -Infinity, "c": 1e400}',
    '{"a": 1, "a": 2}',
    '{}',
])
def test_a_strict_object_scans_as_the_character_walk_does(text: str) -> None:
    fast, walked = scan_strict_object(text), scan_json(text)
    assert fast is not None
    assert (fast.truncated, fast.visible) == (walked.truncated, walked.visible)
    (region,) = fast.regions
    (expected,) = walked.regions
    assert (region.start, region.end, region.text, region.depth) == (
        expected.start, expected.end, expected.text, expected.depth)


@pytest.mark.parametrize("text", [
    'Verdict: {"a": 1}', '{"a": 1} done', "{'a': 1}", '{"a": 1,}', '[{"a": 1}]',
    '{"a": 1', '"{}"', "", "<think>x</think>{}", '{"a": 1} {"a": 2}',
])
def test_anything_but_one_strict_object_takes_the_character_walk(text: str) -> None:
    assert scan_strict_object(text) is None


def test_the_strict_shortcut_is_linear_and_refuses_what_the_decoder_cannot_nest() -> None:
    wide = '{"a": [' + ", ".join(["{}"] * 200_000) + "]}"
    fast = scan_strict_object(wide)
    assert fast is not None
    assert fast.regions[0].depth == 3
    # Deeper than the decoder recurses: the character walk reads it instead.
    assert scan_strict_object('{"a":' * 100_000 + "1" + "}" * 100_000) is None
