"""Claim and save in one transaction (check verdicts), on both backends."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

import pytest

from evalfleet.core.errors import StoreRejected
from evalfleet.store import Claim, ClaimState, SqlStore, VerdictKey, VerdictRecord
from evalfleet.store.group import LEADERS
from evalfleet.store.postgres import PostgresStore, _json_text
from tests.evalfleet.store.test_sql import NOW, record
from tests.helpers import wait_until

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


def transactions(store: SqlStore) -> dict[str, str]:
    """Each stored verdict's sample id with the transaction that wrote it."""
    with store.engine.connect() as conn:
        return dict(conn.exec_driver_sql("SELECT sample_id, xmin::text FROM verdicts").all())


def run_while_held(store: PostgresStore, calls: dict[str, tuple[list[VerdictKey], Any]],
                   ) -> dict[str, list[Claim] | BaseException]:
    """Run ``calls`` (name: keys, settle) in threads while first calls hold every
    transaction the store runs at once, so that they wait together; what each call
    came to.

    The first calls are let go one at a time, the next only once ``calls`` are done: two
    let go at once would each hand the lead to a waiting call, and the waiting calls
    would then form two groups or one by the threads' timing.
    """
    releases = {key: threading.Event() for key in HELD_KEYS}

    def holding(key: VerdictKey) -> Any:
        def settle(claims: list[Claim]) -> list[VerdictRecord]:
            assert releases[key].wait(timeout=30)
            return [record(key)]

        return settle

    outcomes: dict[str, list[Claim] | BaseException] = {}

    def call(name: str, keys: list[VerdictKey], settle: Any) -> None:
        try:
            outcomes[name] = store.claim_and_save(keys, owner=name, lease_s=60, now=NOW,
                                                  settle=settle)
        except Exception as exc:
            outcomes[name] = exc

    threads = [threading.Thread(target=call, args=(key.sample_id, [key], holding(key)))
               for key in HELD_KEYS]
    for thread in threads:
        thread.start()
    wait_until(lambda: held_open(store) == LEADERS, timeout_s=30,
               what="the first transactions")
    threads += [threading.Thread(target=call, args=(name, keys, settle))
                for name, (keys, settle) in calls.items()]
    for thread in threads[LEADERS:]:
        thread.start()
    wait_until(lambda: store._group.waiting == len(calls), timeout_s=30,
               what=f"{len(calls)} waiting calls")
    releases[HELD_KEYS[0]].set()
    wait_until(lambda: outcomes.keys() >= calls.keys(), timeout_s=30,
               what=f"{len(calls)} calls done")
    for release in releases.values():
        release.set()
    for thread in threads:
        thread.join(timeout=60)
    return outcomes


#: The keys of the calls that hold the store's transactions, one a transaction.
HELD_KEYS = [VerdictKey(f"held-{n}", "contract", "c1", "check:valid_json")
             for n in range(LEADERS)]
HELD = HELD_KEYS[0]


def held_open(store: PostgresStore) -> int:
    """How many of the first calls' claims are taken (their transactions open)."""
    with store.engine.connect() as conn:
        return int(conn.exec_driver_sql(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND state = 'idle in transaction'"
        ).scalar_one())


def settle_keys(keys: list[VerdictKey]):  # type: ignore[no-untyped-def]
    def settle(claims: list[Claim]) -> list[VerdictRecord]:
        return [record(key) for key, claim in zip(keys, claims, strict=True)
                if claim.state is ClaimState.CLAIMED]

    return settle


def test_calls_waiting_together_share_one_transaction(store: PostgresStore) -> None:
    first = [VerdictKey(f"a-{n}", "contract", "c1", "check:valid_json") for n in range(2)]
    second = [VerdictKey(f"b-{n}", "contract", "c1", "check:valid_json") for n in range(3)]
    store.claim([second[0]], owner="m2", lease_s=60, now=NOW - timedelta(days=1))  # its own
    outcomes = run_while_held(store, {"m1": (first, settle_keys(first)),
                                      "m2": (second, settle_keys(second))})
    assert outcomes["m1"] == [Claim(ClaimState.CLAIMED)] * 2
    assert outcomes["m2"] == [Claim(ClaimState.CLAIMED)] * 3  # a claim of its own re-taken
    written = transactions(store)
    assert sorted(written) == ["a-0", "a-1", "b-0", "b-1", "b-2", *sorted(
        key.sample_id for key in HELD_KEYS)]
    assert len({written[key.sample_id] for key in first + second}) == 1
    assert len({written[key.sample_id] for key in [*HELD_KEYS, first[0]]}) == LEADERS + 1
    assert claims_left(store) == 0


def test_a_failing_call_of_a_group_fails_alone(store: PostgresStore) -> None:
    fine = [VerdictKey(f"f-{n}", "contract", "c1", "check:valid_json") for n in range(2)]
    long_key = VerdictKey("x" * 300, "contract", "c1", "check:valid_json")

    def raises(claims: list[Claim]) -> list[VerdictRecord]:
        raise ValueError("a bug in a check")

    outcomes = run_while_held(store, {
        "fine": (fine, settle_keys(fine)),
        "refused": ([long_key], lambda claims: [record(long_key)]),
        "raises": ([KEYS[0]], raises),
        "again": ([HELD], settle_keys([HELD])),  # the held call's key: waits for it
    })
    assert outcomes["fine"] == [Claim(ClaimState.CLAIMED)] * 2
    assert isinstance(outcomes["refused"], StoreRejected)
    assert isinstance(outcomes["raises"], StoreRejected)  # as alone: nothing stored
    assert "ValueError: a bug in a check" in str(outcomes["raises"])
    assert outcomes["again"] == [Claim(ClaimState.DONE)]
    assert sorted(transactions(store)) == ["f-0", "f-1", *sorted(
        key.sample_id for key in HELD_KEYS)]
    assert claims_left(store) == 0
