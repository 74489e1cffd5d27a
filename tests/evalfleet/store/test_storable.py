"""Rows made storable at the store boundary, on Postgres and SQLite: text the database
refuses is escaped, a verdict it cannot hold is handed back as a dead letter, the rest
of the batch is stored, and a refusal is never reported as an outage."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import text

from evalfleet.core.errors import StoreRejected
from evalfleet.store import ClaimState, DeadLetter, SqlStore, VerdictKey, VerdictRecord
from evalfleet.store.sql import translate_errors
from evalfleet.store.storable import (
    decode_original,
    first_unstorable,
    storable_as_is,
    storable_json,
    storable_text,
)
from tests.evalfleet.store.test_sql import NOW, claim_one, record


@pytest.mark.parametrize(("raw", "stored"), [
    ("plain", "plain"), ("a\x00b", "a\\u0000b"), ("\ud800x", "\\ud800x"),
    ("tab\tnl\n\x07", "tab\tnl\n\x07"), ("😀", "😀"),
])
def test_storable_text(raw: str, stored: str) -> None:
    assert storable_text(raw) == stored


def test_storable_json_and_the_path_it_names() -> None:
    value = {"a": [1.5, float("inf")], "b\x00": "x", "c": {"d": float("nan")}}
    assert first_unstorable(value, path="payload") == "payload.a[1]"
    assert storable_json(value) == {"a": [1.5, "Infinity"], "b\\u0000": "x", "c": {"d": "NaN"}}
    assert first_unstorable({"fine": [1, "x", None, True, 2**63]}) is None
    assert first_unstorable({"n": 10**5000}) == "n"
    assert storable_json({"n": 10**30, "m": 10**5000, "s": {1}}) == {
        "n": str(10**30), "m": "<an integer of 16,610 bits>", "s": "{1}"}


#: JSON-like values with what the database refuses mixed in: NUL, lone surrogates,
#: non-finite floats, integers past 64 bits, keys that are not text, nesting past 64.
ANY_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats()
    | st.text(alphabet=st.characters(codec=None, categories=None), max_size=8)
    | st.sampled_from(["a\x00", "\ud800", "plain", "é"]),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner)
    | st.dictionaries(st.text(max_size=3) | st.integers(0, 3) | st.just("k\x00"), inner,
                      max_size=3),
    max_leaves=12)


@given(ANY_VALUES)
def test_storable_as_is_agrees_with_the_walk_that_names_the_path(value: Any) -> None:
    assert storable_as_is(value) == (first_unstorable(value) is None)


def test_storable_as_is_at_the_nesting_bound() -> None:
    for depth, expected in ((63, True), (64, False)):
        value: Any = "x"
        for _ in range(depth + 1):
            value = [value]
        assert storable_as_is(value) is (first_unstorable(value) is None) is expected


def letter(payload: object, sample_id: str | None = "s-1") -> DeadLetter:
    return DeadLetter(sample_id=sample_id, metric="rag_qa", error_class="invalid_message",
                      error="bad \x00 message", attempts=0, payload=payload, created_at=NOW)


def test_a_dead_letter_is_stored_with_its_original_recoverable(any_store: SqlStore) -> None:
    payload = {"v": 1, "sample": {"id": "x\x00", "input": "\udc80", "n": float("inf")}}
    any_store.save(dead_letters=[letter(payload, sample_id="x\x00"),
                                 letter(["not", "an", "object\x00"])], owner="")
    stored = list(any_store.iter_dead_letters())
    assert [item.sample_id for item in stored] == ["x\\u0000", "s-1"]
    assert stored[0].payload["sample"] == {"id": "x\\u0000", "input": "\\udc80",
                                           "n": "Infinity"}
    original = stored[0].payload["unstorable_original"]
    assert original["field"] == "payload.sample.id"
    assert decode_original(original["base64"])["sample"]["id"] == "x\x00"
    assert stored[1].payload["storable"] == ["not", "an", "object\\u0000"]
    assert stored[0].error == "bad \\u0000 message"


def test_judge_text_with_nul_is_a_stored_verdict(any_store: SqlStore) -> None:
    any_store.save(verdicts=[record(raw_output="before\x00after", reason="r\x00",
                                    attributes={"app": "\x00"},
                                    raw_scores={"x": float("nan"), "y": 10**5000})],
                   owner="w")
    (stored,) = any_store.iter_verdicts()
    assert (stored.raw_output, stored.reason) == ("before\\u0000after", "r\\u0000")
    assert stored.attributes == {"app": "\\u0000"}
    assert stored.raw_scores == {"x": "NaN", "y": "<an integer of 16,610 bits>"}


def test_an_unstorable_verdict_becomes_a_dead_letter_beside_the_good_ones(
    any_store: SqlStore,
) -> None:
    bad = VerdictKey("bad\x00", "rag_qa", "abc123", "judge-1")
    good = VerdictKey("good", "rag_qa", "abc123", "judge-1")
    huge = VerdictKey("huge", "rag_qa", "abc123", "judge-1")
    for key in (bad, good, huge):
        assert claim_one(any_store, key, "w").state is ClaimState.CLAIMED
    refused: list[tuple[VerdictRecord, StoreRejected]] = []

    def on_rejected(verdict: VerdictRecord, error: StoreRejected) -> DeadLetter:
        refused.append((verdict, error))
        return DeadLetter(sample_id=verdict.key.sample_id, metric="rag_qa",
                          error_class="unstorable", error=str(error), attempts=1,
                          payload={"sample": {"id": verdict.key.sample_id}}, created_at=NOW,
                          verdict_key=verdict.key.digest())

    inserted = any_store.save(verdicts=[record(bad), record(good),
                                        record(huge, prompt_tokens=2**40)],
                              owner="w", on_rejected=on_rejected)
    assert inserted == 1
    assert [(v.key, e.field) for v, e in refused] == [(bad, "sample_id"),
                                                      (huge, "prompt_tokens")]
    assert [v.key for v in any_store.iter_verdicts()] == [good]
    assert len(list(any_store.iter_dead_letters())) == 2
    # Settled: a redelivery finds them done, nobody judges them again.
    for key in (bad, good, huge):
        assert claim_one(any_store, key, "other").state is ClaimState.DONE


def test_without_a_handler_an_unstorable_verdict_raises_rejected(any_store: SqlStore) -> None:
    with pytest.raises(StoreRejected) as raised:
        any_store.save(verdicts=[record(VerdictKey("x" * 300, "m", "v", "j"))], owner="w")
    assert raised.value.field == "sample_id"


def test_database_refusals_are_rejected_not_unavailable(store: SqlStore) -> None:
    assert isinstance(store, SqlStore)
    with pytest.raises(StoreRejected), translate_errors(), store.engine.connect() as conn:
        conn.execute(text("select :x"), {"x": "a\x00b"})
    with pytest.raises(StoreRejected), translate_errors(), store.engine.connect() as conn:
        conn.execute(text("select :x"), {"x": "a\ud800"})
    with pytest.raises(StoreRejected), translate_errors(), store.engine.connect() as conn:
        conn.execute(text("select cast('abcdef' as varchar(3))::int"))
