"""Claim and save in one transaction (check verdicts), on both backends."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from evalfleet.core.errors import StoreRejected
from evalfleet.store import Claim, ClaimState, SqlStore, VerdictKey, VerdictRecord
from evalfleet.store.postgres import _json_text
from tests.evalfleet.store.test_sql import NOW, record

KEYS = [VerdictKey(f"s-{n}", "contract", "c1", "check:valid_json") for n in range(3)]


def claims_left(store: SqlStore) -> int:
    with store.engine.connect() as conn:
        return int(conn.exec_driver_sql("SELECT count(*) FROM claims").scalar_one())


def settle_all(asked: list[list[Claim]]):  # type: ignore[no-untyped-def]
    """A ``settle`` giving a verdict for each claimed key, recording what it was asked."""

    def settle(claims: list[Claim]) -> list[VerdictRecord]:
        asked.append(claims)
        return [record(key) for key, claim in zip(KEYS, claims, strict=True)
                if claim.state is ClaimState.CLAIMED]

    return settle


def test_claimed_keys_are_stored_with_their_claims_dropped_in_one_call(
        any_store: SqlStore) -> None:
    asked: list[list[Claim]] = []
    claims = any_store.claim_and_save(KEYS, owner="m1", lease_s=60, now=NOW,
                                      settle=settle_all(asked))
    assert [claim.state for claim in claims] == [ClaimState.CLAIMED] * 3 and asked == [claims]
    assert sorted(r.key.sample_id for r in any_store.iter_verdicts()) == ["s-0", "s-1", "s-2"]
    assert claims_left(any_store) == 0
    again = any_store.claim_and_save(KEYS, owner="m2", lease_s=60, now=NOW,
                                     settle=settle_all(asked))
    assert [claim.state for claim in again] == [ClaimState.DONE] * 3
    assert len(list(any_store.iter_verdicts())) == 3


def test_a_key_another_owner_holds_is_busy_and_left_alone(any_store: SqlStore) -> None:
    any_store.claim([KEYS[1]], owner="other", lease_s=60, now=NOW)
    claims = any_store.claim_and_save(KEYS, owner="m1", lease_s=60,
                                      now=NOW + timedelta(seconds=15), settle=settle_all([]))
    assert [claim.state for claim in claims] == [
        ClaimState.CLAIMED, ClaimState.BUSY, ClaimState.CLAIMED]
    assert claims[1].retry_in_s == pytest.approx(45)
    assert sorted(r.key.sample_id for r in any_store.iter_verdicts()) == ["s-0", "s-2"]
    assert claims_left(any_store) == 1  # the other owner's


def test_a_refused_verdict_stores_nothing_and_takes_no_claim(any_store: SqlStore) -> None:
    long_key = VerdictKey("x" * 300, "contract", "c1", "check:valid_json")

    def settle(claims: list[Claim]) -> list[VerdictRecord]:
        return [record(KEYS[0]), record(long_key)]

    with pytest.raises(StoreRejected, match="sample_id"):
        any_store.claim_and_save([KEYS[0], long_key], owner="m1", lease_s=60, now=NOW,
                                 settle=settle)
    assert list(any_store.iter_verdicts()) == [] and claims_left(any_store) == 0


def test_no_keys_no_transaction(any_store: SqlStore) -> None:
    assert any_store.claim_and_save([], owner="m1", lease_s=60, now=NOW,
                                    settle=settle_all([])) == []


@pytest.mark.parametrize("value", [
    {"at": NOW, "n": 1.5, "text": "é \u2028"},
    {"wide": 2**70},  # past orjson's 64 bits: json writes it
    {1: "a key that is not a string"},
])
def test_json_parameters_read_back_as_json_writes_them(value: object) -> None:
    expected = json.dumps(value, default=lambda moment: moment.isoformat())
    assert json.loads(_json_text(value)) == json.loads(expected)
