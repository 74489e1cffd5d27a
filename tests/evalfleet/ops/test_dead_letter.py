"""Listing, replaying and purging dead letters against the real store and broker."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path

import pytest
import redis

from evalfleet.core.errors import BrokerUnavailable, InvalidMessage
from evalfleet.core.message import Job, decode_job, encode_batch
from evalfleet.core.settings import Settings
from evalfleet.ops.dead_letter import (
    DeadLetterFilter,
    count_dead_letters,
    dead_letter_json,
    iter_dead_letters,
    purge_dead_letters,
    replay_dead_letters,
    replay_jobs,
)
from evalfleet.store import SqlStore
from producers.enqueuer import Enqueuer
from tests.evalfleet.ops.builders import NOW, dead_letter, job
from tests.helpers import queued

LETTERS = [
    dead_letter("a", created_at=NOW - timedelta(hours=3)),
    dead_letter("b", error_class="judge_rejected", created_at=NOW - timedelta(hours=2)),
    dead_letter("c", metric="bbh_match", created_at=NOW - timedelta(hours=1)),
    dead_letter("d", created_at=NOW),
]


#: Every dead letter.
EVERYTHING = DeadLetterFilter()


def ids(store: SqlStore, selection: DeadLetterFilter = EVERYTHING) -> list[str | None]:
    return [stored.letter.sample_id for stored in iter_dead_letters(store, selection)]


@pytest.mark.parametrize(("selection", "expected"), [
    (DeadLetterFilter(), ["a", "b", "c", "d"]),
    (DeadLetterFilter(metric="rag_qa"), ["a", "b", "d"]),
    (DeadLetterFilter(error_class="judge_rejected"), ["b"]),
    (DeadLetterFilter(since=NOW - timedelta(hours=2)), ["b", "c", "d"]),
    (DeadLetterFilter(until=NOW - timedelta(hours=1)), ["a", "b"]),
    (DeadLetterFilter(metric="rag_qa", limit=2), ["a", "b"]),
])
def test_filters(any_store: SqlStore, selection: DeadLetterFilter,
                 expected: list[str]) -> None:
    any_store.save(dead_letters=LETTERS, owner="t")
    assert ids(any_store, selection) == expected
    assert count_dead_letters(any_store, selection) == len(expected)


def test_listing_keeps_history_and_payload(any_store: SqlStore) -> None:
    any_store.save(dead_letters=LETTERS[:1], owner="t")
    (stored,) = iter_dead_letters(any_store, DeadLetterFilter())
    assert stored.letter == LETTERS[0]
    row = dead_letter_json(stored)
    assert [entry["attempt"] for entry in row["history"]] == [1, 2, 3]
    assert row["payload"]["sample"]["id"] == "a" and row["created_at"].endswith("Z")


def test_replayed_jobs_start_over_with_their_history() -> None:
    letter = dead_letter("a", attempts=3)
    (again,) = replay_jobs(letter)
    assert again.attempt == 1 and again.sample.id == "a"
    assert [(f.attempt, f.error) for f in again.history] == [
        (1, "failure 1"), (2, "failure 2"), (3, "failure 3")]
    batch = dead_letter("b", payload=encode_batch([job("x"), job("y")]))
    assert [j.sample.id for j in replay_jobs(batch)] == ["x", "y"]
    with pytest.raises(InvalidMessage):
        replay_jobs(dead_letter("c", payload={"not": "a job"}))


@pytest.fixture
def enqueuer(redis_url: str, tmp_path: Path) -> Iterator[Enqueuer]:
    found = Enqueuer(Settings(broker_url=redis_url, data_dir=tmp_path))
    yield found
    found.close()


def test_replay_publishes_then_deletes(store: SqlStore, enqueuer: Enqueuer,
                                       redis_url: str) -> None:
    store.save(dead_letters=[*LETTERS, dead_letter("bad", payload="garbage")], owner="t")
    selection = DeadLetterFilter(metric="rag_qa")
    dry = replay_dead_letters(store, selection, publish=enqueuer.send_many, dry_run=True)
    assert (dry.letters, dry.jobs) == (3, {"rag_qa": 3})
    client = redis.Redis.from_url(redis_url)
    assert queued(client, "rag_qa") == []
    report = replay_dead_letters(store, DeadLetterFilter(), publish=enqueuer.send_many,
                                 batch_rows=2)
    assert (report.letters, report.jobs) == (4, {"rag_qa": 3, "bbh_match": 1})
    assert [letter_id for letter_id, _ in report.skipped] == [5]
    published = [decode_job(message) for message, _ in queued(client, "rag_qa")]
    assert [j.sample.id for j in published] == ["a", "b", "d"]
    assert all(j.attempt == 1 and len(j.history) == 3 for j in published)
    assert ids(store) == ["bad"]  # only the letter that is not a job stays


def test_a_failed_publish_keeps_its_letters(store: SqlStore) -> None:
    store.save(dead_letters=LETTERS, owner="t")
    calls: list[int] = []

    def publish(jobs: Sequence[Job]) -> None:
        calls.append(len(jobs))
        if len(calls) == 2:
            raise BrokerUnavailable("cannot publish to the broker: down")

    report = replay_dead_letters(store, DeadLetterFilter(), publish=publish, batch_rows=2)
    assert report.letters == 2 and report.error == "cannot publish to the broker: down"
    assert ids(store) == ["c", "d"]


def test_two_replays_at_once_never_publish_a_letter_twice(store: SqlStore) -> None:
    store.save(dead_letters=[dead_letter(f"s{n}") for n in range(40)], owner="t")
    published: list[str] = []
    lock = threading.Lock()

    def slow_publish(jobs: Sequence[Job]) -> None:
        time.sleep(0.05)  # hold the batch's row locks while the other replay runs
        with lock:
            published.extend(j.sample.id for j in jobs)

    replays = [threading.Thread(target=replay_dead_letters, args=(store, DeadLetterFilter()),
                                kwargs={"publish": slow_publish, "batch_rows": 5})
               for _ in range(2)]
    for replay in replays:
        replay.start()
    for replay in replays:
        replay.join()
    assert sorted(published) == sorted(f"s{n}" for n in range(40))
    assert ids(store) == []


def test_purge(any_store: SqlStore) -> None:
    any_store.save(dead_letters=LETTERS, owner="t")
    assert purge_dead_letters(any_store, DeadLetterFilter(metric="rag_qa"), dry_run=True) == 3
    assert purge_dead_letters(any_store, DeadLetterFilter(metric="rag_qa", limit=1),
                              batch_rows=100) == 1
    assert ids(any_store) == ["b", "c", "d"]
    assert purge_dead_letters(any_store, DeadLetterFilter(), batch_rows=2) == 3
    assert ids(any_store) == []
