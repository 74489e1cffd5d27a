"""The built-in checks of an agent's trajectory: plain functions from a trajectory to a
result.

The calls checked are the trajectory's tool steps, in order; a trajectory with no tool
step (a producer that recorded only model calls) has the tool calls its models asked
for instead. Every check is one pass over the calls, whatever their number, and never
recurses on their arguments: identical arguments are found by a canonical JSON text
(orjson, or an explicit stack past orjson's nesting limit), a tool's schema is refused,
as a metric's is, before anything is validated against it, and the arguments validated
are held to what a ``json_schema`` check reads.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from evalfleet.core.checkspec import (
    ForbiddenTools,
    MaxSteps,
    MaxToolErrors,
    RepeatedCalls,
    ToolArguments,
    ToolSequence,
    TrajectoryCheck,
    check_schema_document,
)
from evalfleet.core.trajectory import ModelStep, ToolSpec, ToolStep, Trajectory
from workers.checks.builtin import MAX_SCHEMA_INSTANCE_CHARS
from workers.checks.result import BAD_TOOL_SCHEMA, TOO_LARGE, CheckResult
from workers.checks.schema import SchemaValidator

#: A prepared trajectory check: the trajectory in, the result out.
TrajectoryFunction = Callable[[Trajectory], CheckResult]


@dataclass(frozen=True, slots=True)
class Call:
    """One tool call of a trajectory."""

    at: str
    """Where it is: ``steps[4]``, or ``steps[2].output[0].tool_calls[1]``."""
    name: str
    arguments: Any


def prepare(spec: TrajectoryCheck) -> TrajectoryFunction:
    """The function that runs trajectory check ``spec``."""
    if isinstance(spec, ToolSequence):
        return lambda trajectory: _sequence(trajectory, spec)
    if isinstance(spec, ToolArguments):
        return _arguments
    if isinstance(spec, ForbiddenTools):
        forbidden = frozenset(spec.tools)
        return lambda trajectory: _forbidden(trajectory, forbidden)
    if isinstance(spec, RepeatedCalls):
        return lambda trajectory: _repeated(trajectory, spec.times)
    if isinstance(spec, MaxSteps):
        return lambda trajectory: _max_steps(trajectory, spec)
    return lambda trajectory: _max_tool_errors(trajectory, spec)


def calls(trajectory: Trajectory) -> Iterator[Call]:
    """The trajectory's tool calls, in order: its tool steps, or when it has none the
    calls its models asked for."""
    if any(isinstance(step, ToolStep) for step in trajectory.steps):
        for n, step in enumerate(trajectory.steps):
            if isinstance(step, ToolStep):
                yield Call(f"steps[{n}]", step.name, step.arguments)
        return
    for n, step in enumerate(trajectory.steps):
        if isinstance(step, ModelStep):
            for m, message in enumerate(step.output):
                for c, call in enumerate(message.tool_calls):
                    yield Call(f"steps[{n}].output[{m}].tool_calls[{c}]", call.name,
                               call.arguments)


def _sequence(trajectory: Trajectory, spec: ToolSequence) -> CheckResult:
    made = [call.name for call in calls(trajectory)]
    expected = list(spec.expected)
    if spec.mode == "strict":
        if made == expected:
            return CheckResult.scored(True, f"the {len(made)} expected calls, in order")
        n = next((n for n, (a, b) in enumerate(zip(made, expected, strict=False)) if a != b),
                 min(len(made), len(expected)))
        if n < min(len(made), len(expected)):
            why = f"call {n + 1} is {made[n]!r} where {expected[n]!r} was expected"
        elif len(made) < len(expected):
            why = f"{len(made)} calls, {len(expected)} expected: {expected[n]!r} is missing"
        else:
            why = f"{len(made)} calls, {len(expected)} expected: {made[n]!r} is extra"
        return CheckResult.scored(False, why)
    missing = Counter(expected) - Counter(made)
    extra = Counter(made) - Counter(expected)
    checked = {"unordered": [("missing", missing), ("not expected", extra)],
               "subset": [("missing", missing)], "superset": [("not expected", extra)]}
    faults = [f"{label}: {_counted(counter)}" for label, counter in checked[spec.mode]
              if counter]
    if faults:
        return CheckResult.scored(False, "; ".join(faults))
    return CheckResult.scored(True, f"{len(made)} calls, {len(expected)} expected "
                              f"({spec.mode})")


def _counted(counter: Counter[str]) -> str:
    shown = [f"{name!r}" + (f" x{count}" if count > 1 else "")
             for name, count in counter.most_common(5)]
    more = len(counter) - len(shown)
    return ", ".join(shown) + (f" and {more} more tools" if more > 0 else "")


def _arguments(trajectory: Trajectory) -> CheckResult:
    offered: dict[str, ToolSpec] = {}
    for offer in trajectory.tools:
        offered.setdefault(offer.name, offer)
    validators: dict[str, SchemaValidator | CheckResult | None] = {}
    checked = read = 0
    for call in calls(trajectory):
        tool = offered.get(call.name)
        if tool is None:
            return CheckResult.scored(False, f"{call.at}: {call.name!r} was not offered")
        if call.name not in validators:
            validators[call.name] = _validator(tool)
        validator = validators[call.name]
        if validator is None:
            continue
        if isinstance(validator, CheckResult):
            return validator
        read += len(canonical(call.arguments))
        if read > MAX_SCHEMA_INSTANCE_CHARS:
            return CheckResult.failure(TOO_LARGE, f"the arguments up to {call.at} pass the "
                                       f"{MAX_SCHEMA_INSTANCE_CHARS:,} characters a schema "
                                       "check reads")
        result = validator.check(call.arguments)
        if result.error_class is not None:
            return CheckResult.failure(result.error_class,
                                       f"{call.at} {call.name!r}: {result.reason}")
        if result.score is False:
            not_json = " (its arguments are not JSON)" if isinstance(call.arguments, str) else ""
            return CheckResult.scored(False, f"{call.at} {call.name!r}{not_json}: "
                                      f"{result.reason}")
        checked += 1
    return CheckResult.scored(True, f"{checked} calls valid against their tools' schemas")


def _validator(tool: ToolSpec) -> SchemaValidator | CheckResult | None:
    """The tool's compiled schema; None when it has none; a failure when the schema is
    one a worker must not use (too deep, a remote ``$ref``, not a schema)."""
    if tool.parameters is None:
        return None
    try:
        check_schema_document(tool.parameters)
    except ValueError as exc:
        return CheckResult.failure(BAD_TOOL_SCHEMA, f"tool {tool.name!r}: {exc}")
    return SchemaValidator(tool.parameters)


def _forbidden(trajectory: Trajectory, forbidden: frozenset[str]) -> CheckResult:
    found = [call for call in calls(trajectory) if call.name in forbidden]
    if not found:
        return CheckResult.scored(True, "no forbidden tool called")
    names = _counted(Counter(call.name for call in found))
    return CheckResult.scored(False, f"{len(found)} forbidden calls ({names}), "
                              f"the first at {found[0].at}")


def _repeated(trajectory: Trajectory, times: int) -> CheckResult:
    last: tuple[str, str] | None = None
    run = longest = 0
    for call in calls(trajectory):
        key = (call.name, canonical(call.arguments))
        run = run + 1 if key == last else 1
        last = key
        longest = max(longest, run)
        if run >= times:
            return CheckResult.scored(False, f"{call.name!r} called {times} times in a row "
                                      f"with the same arguments, the last at {call.at}")
    return CheckResult.scored(True, f"at most {longest} identical calls in a row "
                              f"(fails at {times})")


def _max_steps(trajectory: Trajectory, spec: MaxSteps) -> CheckResult:
    if spec.types:
        count = sum(1 for step in trajectory.steps if step.type in spec.types)
        what = f"{'/'.join(spec.types)} steps"
    else:
        count, what = len(trajectory.steps), "steps"
    return _within(count, spec.max, what)


def _max_tool_errors(trajectory: Trajectory, spec: MaxToolErrors) -> CheckResult:
    count = sum(1 for step in trajectory.steps
                if isinstance(step, ToolStep) and step.error is not None)
    return _within(count, spec.max, "tool errors")


def _within(count: int, most: int, what: str) -> CheckResult:
    passed = count <= most
    return CheckResult.scored(passed, f"{count:,} {what}, {'within' if passed else 'over'} "
                              f"the limit of {most:,}")


def canonical(value: Any) -> str:
    """``value`` as JSON text with sorted keys, equal for equal values; nesting past
    orjson's limit (it refuses rather than recursing) is written by an explicit stack."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:  # orjson.JSONEncodeError: too deep, or an integer past 64 bits
        return _canonical_by_stack(value)


def _canonical_by_stack(value: Any) -> str:
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Text):
            out.append(item.text)
        elif isinstance(item, dict):
            parts: list[Any] = [_Text("{")]
            for n, key in enumerate(sorted(item)):
                parts.extend([_Text(("," if n else "") + json.dumps(key) + ":"), item[key]])
            stack.extend(reversed([*parts, _Text("}")]))
        elif isinstance(item, list):
            parts = [_Text("[")]
            for n, element in enumerate(item):
                parts.extend([_Text(",")] if n else [])
                parts.append(element)
            stack.extend(reversed([*parts, _Text("]")]))
        else:
            out.append(json.dumps(item))
    return "".join(out)


@dataclass(frozen=True, slots=True)
class _Text:
    """Literal text among the values still to write."""

    text: str
