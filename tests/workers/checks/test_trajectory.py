"""The trajectory checks, table-tested at their edges and against hostile trajectories."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from evalfleet.core.checkspec import CheckSpec, LoadedCheck, check_version
from evalfleet.core.sample import Sample
from evalfleet.core.trajectory import Trajectory
from workers.checks import CheckResult, CheckRunner
from workers.checks import trajectory as checks
from workers.checks.builtin import MAX_SCHEMA_INSTANCE_CHARS
from workers.checks.result import BAD_TOOL_SCHEMA, NO_TRAJECTORY, SCHEMA_RECURSION, TOO_LARGE

SPEC: TypeAdapter[Any] = TypeAdapter(CheckSpec)

WEATHER = {"name": "weather", "parameters": {
    "type": "object", "required": ["city"], "additionalProperties": False,
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}}}}
SEARCH = {"name": "search", "parameters": {"type": "object"}}
FREE = {"name": "free"}  # offered without a schema: any arguments


def tool(name: str, arguments: Any = None, error: str | None = None) -> dict[str, Any]:
    return {"type": "tool", "name": name, "arguments": arguments, "error": error}


def trajectory(*steps: dict[str, Any], tools: list[dict[str, Any]] | None = None) -> Trajectory:
    return Trajectory.model_validate({"steps": list(steps),
                                      "tools": [WEATHER, SEARCH, FREE] if tools is None else tools})


def named(*names: str) -> Trajectory:
    return trajectory(*(tool(name) for name in names))


def run(spec: dict[str, Any], run_on: Trajectory) -> CheckResult:
    return checks.prepare(SPEC.validate_python(spec))(run_on)


def check(spec: dict[str, Any], run_on: Trajectory, passed: bool, reason: str = "") -> None:
    result = run(spec, run_on)
    assert result.error_class is None and result.score is passed, result
    assert re.search(reason, result.reason), result


@pytest.mark.parametrize(("mode", "made", "passed", "reason"), [
    ("strict", ["a", "b"], True, "the 2 expected calls, in order"),
    ("strict", ["b", "a"], False, "call 1 is 'b' where 'a' was expected"),
    ("strict", ["a"], False, "1 calls, 2 expected: 'b' is missing"),
    ("strict", ["a", "b", "b"], False, "'b' is extra"),
    ("strict", [], False, "'a' is missing"),
    ("unordered", ["b", "a"], True, "unordered"),
    ("unordered", ["b", "a", "a"], False, "not expected: 'a'"),
    ("unordered", ["b"], False, "missing: 'a'"),
    ("unordered", ["b", "c"], False, "missing: 'a'; not expected: 'c'"),
    ("subset", ["c", "b", "x", "a"], True, "subset"),
    ("subset", ["a", "a"], False, "missing: 'b'"),
    ("superset", ["b"], True, "superset"),
    ("superset", [], True, "0 calls"),
    ("superset", ["a", "b", "b"], False, "not expected: 'b'"),
    ("superset", ["c", "c"], False, "not expected: 'c' x2"),
])
def test_tool_sequence(mode: str, made: list[str], passed: bool, reason: str) -> None:
    check({"check": "tool_sequence", "expected": ["a", "b"], "mode": mode}, named(*made),
          passed, reason)


def test_an_empty_expected_sequence() -> None:
    spec = {"check": "tool_sequence", "expected": []}
    check(spec, named(), True)
    check(spec, named("a"), False, "'a' is extra")
    check({**spec, "mode": "subset"}, named("a"), True)


def test_calls_asked_for_by_the_model_count_when_no_tool_step_was_recorded() -> None:
    asked = {"type": "model", "output": [{"role": "assistant", "tool_calls": [
        {"name": "weather", "arguments": {"city": "Oslo"}}, {"name": "search"}]}]}
    made = trajectory(asked, asked)
    check({"check": "tool_sequence", "expected": ["weather", "search"] * 2}, made, True)
    check({"check": "forbidden_tools", "tools": ["search"]}, made, False,
          r"first at steps\[0\]\.output\[0\]\.tool_calls\[1\]")
    # Once a tool step is recorded, the tool steps are the calls (none counted twice).
    check({"check": "tool_sequence", "expected": ["free"]},
          trajectory(asked, tool("free")), True)


@pytest.mark.parametrize(("steps", "passed", "reason"), [
    ([tool("weather", {"city": "Oslo"}), tool("weather", {"city": "Oslo", "days": 2})],
     True, "2 calls valid"),
    ([], True, "0 calls valid"),
    ([tool("free", "any thing"), tool("search", {"q": 1})], True, "1 calls valid"),
    ([tool("weather", {"city": "Oslo", "days": 0})], False,
     r"steps\[0\] 'weather': at \$\.days: 0 is less than the minimum of 1"),
    ([tool("weather", {"town": "Oslo"})], False, "'city' is a required property"),
    ([tool("weather", {"city": "Oslo"}), tool("weather", '{"city": "Os')], False,
     r"steps\[1\] 'weather' \(its arguments are not JSON\): .* is not of type 'object'"),
    ([tool("weather", None)], False, "None is not of type 'object'"),
    ([tool("search", {}), tool("delete_user", {"id": 1})], False,
     r"steps\[1\]: 'delete_user' was not offered"),
])
def test_tool_arguments(steps: list[dict[str, Any]], passed: bool, reason: str) -> None:
    check({"check": "tool_arguments"}, trajectory(*steps), passed, reason)


def test_no_tool_offered_makes_every_call_unoffered() -> None:
    check({"check": "tool_arguments"}, trajectory(tool("search", {}), tools=[]), False,
          "was not offered")


@pytest.mark.parametrize(("parameters", "error"), [
    ({"$ref": "https://example.com/schema.json"}, "points outside the schema"),
    ({"type": "objekt"}, "not a valid JSON Schema"),
    ({"type": "object", "properties": {"a": {"properties": {"b": {}}}}}, None),
    (True, None),
])
def test_an_offered_schema_a_worker_must_not_use_is_a_named_failure(
        parameters: Any, error: str | None) -> None:
    result = run({"check": "tool_arguments"},
                 trajectory(tool("t", {"a": {}}), tools=[{"name": "t", "parameters": parameters}]))
    if error is None:
        assert result.error_class is None, result
    else:
        assert result.error_class == BAD_TOOL_SCHEMA and error in result.reason, result
        assert "tool 't'" in result.reason


def test_a_schema_ten_thousand_levels_deep_is_refused_without_recursing() -> None:
    deep: dict[str, Any] = {"type": "object"}
    for _ in range(10_000):
        deep = {"type": "object", "properties": {"a": deep}}
    result = run({"check": "tool_arguments"},
                 trajectory(tool("t", {}), tools=[{"name": "t", "parameters": deep}]))
    assert result.error_class == BAD_TOOL_SCHEMA and "deeper than 64" in result.reason


def test_a_recursive_ref_in_an_offered_schema_is_a_named_failure() -> None:
    result = run({"check": "tool_arguments"},
                 trajectory(tool("t", {}), tools=[{"name": "t", "parameters": {"$ref": "#"}}]))
    assert result.error_class == SCHEMA_RECURSION and "'t'" in result.reason, result


def deeply_nested(levels: int, leaf: Any = 1) -> Any:
    value = leaf
    for n in range(levels):
        value = {"k": value} if n % 2 else [value]
    return value


def test_deeply_nested_arguments_get_a_result() -> None:
    nested = deeply_nested(5_000)
    made = trajectory(*[tool("free", nested) for _ in range(5)])
    check({"check": "repeated_calls"}, made, False, "'free' called 5 times in a row")
    check({"check": "tool_arguments"}, made, True)
    tree = {"name": "free", "parameters": {"anyOf": [
        {"type": "array", "items": {"$ref": "#"}},
        {"type": "object", "additionalProperties": {"$ref": "#"}}, {"type": "integer"}]}}
    check({"check": "tool_arguments"},
          trajectory(tool("free", deeply_nested(50)), tools=[tree]), True)
    check({"check": "tool_arguments"},
          trajectory(tool("free", deeply_nested(50, "leaf")), tools=[tree]), False)
    result = run({"check": "tool_arguments"}, trajectory(tool("free", nested), tools=[tree]))
    assert result.error_class == SCHEMA_RECURSION and "steps[0] 'free'" in result.reason, result


@pytest.mark.parametrize(("names", "passed", "reason"), [
    ([], True, "no forbidden tool called"),
    (["search", "weather"], True, "no forbidden"),
    (["search", "delete_user", "drop", "delete_user"], False,
     r"3 forbidden calls \('delete_user' x2, 'drop'\), the first at steps\[1\]"),
])
def test_forbidden_tools(names: list[str], passed: bool, reason: str) -> None:
    check({"check": "forbidden_tools", "tools": ["delete_user", "drop"]}, named(*names),
          passed, reason)


def test_forbidden_tools_needs_a_tool() -> None:
    with pytest.raises(ValidationError):
        SPEC.validate_python({"check": "forbidden_tools", "tools": []})


A = tool("search", {"q": "x", "n": 1})
A_REORDERED = tool("search", {"n": 1, "q": "x"})
B = tool("search", {"q": "y", "n": 1})
THINK = {"type": "model", "output": [{"role": "assistant", "content": "again"}]}


@pytest.mark.parametrize(("times", "steps", "passed", "reason"), [
    (5, [A] * 4, True, "at most 4 identical calls in a row"),
    (5, [A] * 5, False, r"'search' called 5 times in a row .* the last at steps\[4\]"),
    (5, [A, A_REORDERED, A, A_REORDERED, A], False, "5 times"),  # key order is not a difference
    (5, [A, THINK, A, THINK, A, THINK, A, THINK, A], False, "5 times"),  # model steps between
    (5, [A, A, B, A, A, A], True, "at most 3"),
    (5, [A] * 4 + [tool("weather", {"q": "x", "n": 1})] + [A] * 4, True, "at most 4"),
    (2, [A, A], False, "2 times in a row"),
    (2, [A, B], True, "at most 1"),
    (3, [tool("free", "not json")] * 3, False, "3 times"),
    (3, [], True, "at most 0"),
])
def test_repeated_calls(times: int, steps: list[dict[str, Any]], passed: bool,
                        reason: str) -> None:
    check({"check": "repeated_calls", "times": times}, trajectory(*steps), passed, reason)


def test_repeated_calls_default_to_five_and_need_two() -> None:
    assert SPEC.validate_python({"check": "repeated_calls"}).times == 5
    with pytest.raises(ValidationError):
        SPEC.validate_python({"check": "repeated_calls", "times": 1})


@pytest.mark.parametrize(("spec", "passed", "reason"), [
    ({"max": 4}, True, "4 steps, within the limit of 4"),
    ({"max": 3}, False, "4 steps, over the limit of 3"),
    ({"max": 0, "types": ["handoff"]}, True, "0 handoff steps"),
    ({"max": 2, "types": ["tool", "model"]}, False, "3 tool/model steps, over"),
])
def test_max_steps(spec: dict[str, Any], passed: bool, reason: str) -> None:
    made = trajectory(THINK, tool("a"), tool("b"), {"type": "retrieval", "query": "q"})
    check({"check": "max_steps", **spec}, made, passed, reason)


@pytest.mark.parametrize(("limit", "errors", "passed"), [
    (0, [None, None], True), (0, [None, "timeout"], False), (1, ["x", None], True),
    (1, ["x", "y"], False), (0, [""], False),  # an empty error is still an error
])
def test_max_tool_errors(limit: int, errors: list[str | None], passed: bool) -> None:
    made = trajectory(*(tool("a", error=error) for error in errors))
    check({"check": "max_tool_errors", "max": limit}, made, passed,
          f"{sum(e is not None for e in errors)} tool errors")


def test_a_hundred_thousand_step_trajectory_gets_every_result() -> None:
    steps = [tool("search", {"q": f"query {n}"}, error="boom" if n % 1000 == 0 else None)
             if n % 2 else THINK for n in range(100_000)]
    made = trajectory(*steps)
    check({"check": "tool_sequence", "expected": ["search"], "mode": "subset"}, made, True)
    check({"check": "tool_sequence", "expected": ["search"]}, made, False, "50000 calls")
    check({"check": "tool_arguments"}, made, True, "50000 calls valid")
    check({"check": "forbidden_tools", "tools": ["weather"]}, made, True)
    check({"check": "repeated_calls"}, made, True, "at most 1")
    check({"check": "max_steps", "max": 1000}, made, False, "100,000 steps")
    check({"check": "max_tool_errors", "max": 10}, made, True, "0 tool errors")


def test_arguments_past_what_a_schema_check_reads_are_too_large() -> None:
    big = {"q": "x" * (MAX_SCHEMA_INSTANCE_CHARS // 4)}
    check({"check": "tool_arguments"}, trajectory(*[tool("search", big)] * 3), True)
    result = run({"check": "tool_arguments"}, trajectory(*[tool("search", big)] * 4))
    assert result.error_class == TOO_LARGE and r"up to steps[3]" in result.reason, result
    # Calls to a tool without a schema are not read.
    check({"check": "tool_arguments"}, trajectory(*[tool("free", big)] * 8), True)


def test_canonical_text_is_the_same_past_orjsons_nesting_limit() -> None:
    value = {"b": [1, 2**70, None, "x"], "a": {"z": True, "y": 1.5}}
    assert checks.canonical(value) == '{"a":{"y":1.5,"z":true},"b":[1,' + str(2**70) + ',null,"x"]}'
    shallow = deeply_nested(100)
    assert checks.canonical(shallow) == checks._canonical_by_stack(shallow)
    assert checks.canonical(deeply_nested(10_000)).count("[") == 5_000


def test_a_sample_without_a_trajectory_is_a_named_failure() -> None:
    runner = CheckRunner()
    for spec in ({"check": "tool_arguments"}, {"check": "max_steps", "max": 3}):
        parsed = SPEC.validate_python(spec)
        prepared = runner._prepare(LoadedCheck("c", parsed, check_version(parsed)))
        result = runner.run(prepared, Sample(id="s1", output="x")).result
        assert result.error_class == NO_TRAJECTORY and result.score is None, result
        with_one = Sample(id="s2", output="x", trajectory=named("free"))
        assert runner.run(prepared, with_one).result.score is True


def test_a_check_version_is_a_hash_of_its_parameters() -> None:
    def version(spec: dict[str, Any]) -> str:
        return check_version(SPEC.validate_python(spec))

    base = {"check": "tool_sequence", "expected": ["a", "b"]}
    assert version(base) == version({**base, "mode": "strict"}) == version(dict(base))
    assert len({version(base), version({**base, "mode": "subset"}),
                version({**base, "expected": ["b", "a"]}),
                version({"check": "repeated_calls"}),
                version({"check": "repeated_calls", "times": 4})}) == 5


@pytest.mark.parametrize("spec", [
    {"check": "tool_sequence", "expected": ["a"], "mode": "any"},
    {"check": "tool_sequence"},
    {"check": "max_steps"},
    {"check": "max_steps", "max": -1},
    {"check": "max_steps", "max": 3, "types": ["thought"]},
    {"check": "max_tool_errors", "max": -1},
    {"check": "tool_arguments", "field": "output"},
])
def test_refused_when_the_metric_loads(spec: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        SPEC.validate_python(spec)
