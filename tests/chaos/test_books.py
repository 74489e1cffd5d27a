"""The chaos books: each guarantee, kept and broken, on small ledgers."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from testkit.chaos.books import Allowance, Ledger, broken_guarantees, extra_calls

NONE_WASTED = Allowance(total=0, per_sample=0, reason="nothing failed")


def ledger(**changes: Any) -> Ledger:
    """Three samples, each judged once and stored once; ``changes`` break it."""
    ids = ("a", "b", "c")
    base = Ledger(
        accepted=frozenset(ids), verdicts=dict.fromkeys(ids, 1), dead_letters={},
        answered=dict.fromkeys(ids, 1), calls=dict.fromkeys(ids, 1),
        calls_when_stored=dict.fromkeys(ids, 1),
    )
    return replace(base, **changes)


def test_a_clean_run_breaks_nothing() -> None:
    assert broken_guarantees(ledger(), NONE_WASTED) == []
    assert extra_calls(ledger()) == {}


@pytest.mark.parametrize(("changes", "broken"), [
    ({"verdicts": {"a": 1, "b": 1}, "answered": {"a": 1, "b": 1, "c": 0}},
     "c: 0 verdict(s) and 0 dead letter(s)"),
    ({"dead_letters": {"a": 1}}, "a: 1 verdict(s) and 1 dead letter(s)"),
    ({"verdicts": {"a": 1, "b": 1, "c": 0}, "dead_letters": {"c": 2},
      "answered": {"a": 1, "b": 1, "c": 0}}, "c: 0 verdict(s) and 2 dead letter(s)"),
    ({"verdicts": {"a": 1, "b": 1, "c": 1, "z": 1}}, "z: settled but never accepted"),
    ({"duplicate_keys": 1}, "1 verdict key(s) stored more than once"),
    ({"calls": {"a": 2, "b": 1, "c": 1}}, "a: judged again after its verdict was stored"),
    ({"answered": {"a": 0, "b": 1, "c": 1}}, "a: a verdict without a 200 reply"),
    ({"answered": {"a": 2, "b": 1, "c": 1}}, "1 extra judge calls, allowed 0"),
    ({"answered_at_end": {"a": 0}, "answered": {"a": 2, "b": 1, "c": 1}},
     "a: 2 200 replies after the disturbance ended"),
])
def test_each_broken_guarantee_is_named(changes: dict[str, Any], broken: str) -> None:
    found = broken_guarantees(ledger(**changes), NONE_WASTED)
    assert any(broken in line for line in found), found


def test_a_dead_letter_with_an_answer_is_an_extra_call() -> None:
    books = ledger(verdicts={"a": 1, "b": 1}, dead_letters={"c": 1})
    assert extra_calls(books) == {"c": 1}


@pytest.mark.parametrize(("allowance", "broken"), [
    (Allowance(total=3, per_sample=2, reason="two kills"), []),
    (Allowance(total=2, per_sample=2, reason="one kill"),
     ["3 extra judge calls, allowed 2 (one kill)"]),
    (Allowance(total=3, per_sample=1, reason="one kill"), ["a: 2 extra judge calls, allowed 1"]),
    (Allowance(total=3, per_sample=2, reason="claimed ones", explained=frozenset({"a"})),
     ["b: 1 extra judge call(s) the disturbance cannot explain"]),
])
def test_extra_calls_stay_within_the_allowance(allowance: Allowance,
                                               broken: list[str]) -> None:
    books = ledger(answered={"a": 3, "b": 2, "c": 1}, calls={"a": 3, "b": 2, "c": 1},
                   calls_when_stored={"a": 3, "b": 2, "c": 1})
    assert extra_calls(books) == {"a": 2, "b": 1}
    assert broken_guarantees(books, allowance) == broken
