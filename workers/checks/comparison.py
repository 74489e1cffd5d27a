"""Checks against a reference: text similarity (rapidfuzz) and JSON equality. Pure.

Both run in time bounded by their inputs: a similarity reads at most
:data:`MAX_SIMILARITY_CHARS` a side (its cost grows with the product of the two
lengths), and a JSON comparison walks the two documents once, without recursion.
"""

from __future__ import annotations

import math
from typing import Any

import orjson
from rapidfuzz import fuzz

from evalfleet.core.checkspec import JsonEquals, Similar
from workers.checks.result import TOO_LARGE, CheckResult

#: Longest text a similarity check compares, each side, in characters.
MAX_SIMILARITY_CHARS = 100_000

_METHODS = {"ratio": fuzz.ratio, "partial": fuzz.partial_ratio,
            "token_sort": fuzz.token_sort_ratio, "token_set": fuzz.token_set_ratio}


def similar(text: str, reference: str, spec: Similar, *,
            normalised: tuple[str, str]) -> CheckResult:
    """``similar``: the two texts' similarity against ``spec.min``.

    Args:
        text: The checked value, as written.
        reference: The reference, as written.
        spec: The check.
        normalised: Both, after the check's ``normalise``.
    """
    longest = max(len(text), len(reference))
    if longest > MAX_SIMILARITY_CHARS:
        return CheckResult.failure(TOO_LARGE, f"{longest:,} characters, over the "
                                   f"{MAX_SIMILARITY_CHARS:,} a similarity check reads")
    score = _METHODS[spec.method](*normalised) / 100
    passed = score >= spec.min
    return CheckResult.scored(passed, f"{spec.method} similarity {score:.3f}, "
                              f"{'at least' if passed else 'below'} {spec.min:g}")


def json_equals(text: str, reference: str, spec: JsonEquals) -> CheckResult:
    """``json_equals``: both parse as JSON and are equal; the reason names the first
    place they differ (``$.items[2].price``)."""
    documents = []
    for name, value in (("the value", text), ("the reference", reference)):
        try:
            documents.append(orjson.loads(value))
        except orjson.JSONDecodeError as exc:
            return CheckResult.scored(False, f"{name} is not valid JSON: {exc}")
    difference = first_difference(*documents, tolerance=spec.tolerance)
    if difference is None:
        return CheckResult.scored(True, "equal JSON documents")
    return CheckResult.scored(False, f"differs at {difference}")


def first_difference(value: Any, expected: Any, *, tolerance: float = 0.0) -> str | None:
    """The path of the first place two decoded JSON documents differ, or None.

    Objects are equal with the same keys and equal values, whatever their order; arrays
    with equal items in the same order; numbers within ``tolerance``; a boolean equals
    only a boolean. One pass with a stack: a document nested to orjson's limit
    (1,024 levels) never reaches Python's recursion limit.
    """
    stack: list[tuple[str, Any, Any]] = [("$", value, expected)]
    while stack:
        path, left, right = stack.pop()
        if isinstance(left, dict) and isinstance(right, dict):
            if left.keys() != right.keys():
                key = sorted(left.keys() ^ right.keys())[0]
                return f"{path}.{key} ({'extra' if key in left else 'missing'})"
            stack.extend((f"{path}.{key}", left[key], right[key]) for key in reversed(right))
        elif isinstance(left, list) and isinstance(right, list):
            if len(left) != len(right):
                return f"{path} ({len(left)} items, the reference has {len(right)})"
            stack.extend((f"{path}[{n}]", left[n], right[n]) for n in reversed(range(len(right))))
        elif not _same_scalar(left, right, tolerance=tolerance):
            return path
    return None


def _same_scalar(left: Any, right: Any, *, tolerance: float) -> bool:
    if isinstance(left, bool) or isinstance(right, bool) or left is None or right is None:
        return left is right
    if isinstance(left, int | float) and isinstance(right, int | float):
        return left == right or math.isclose(left, right, rel_tol=0.0, abs_tol=tolerance)
    return type(left) is type(right) and left == right
