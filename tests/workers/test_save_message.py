"""The save message: judged verdicts kept on the broker while the database is away.

Encoding is pure (tables); the evaluator hands its rows over when its own
database stops taking connections between the claim and the save.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from evalfleet.broker.queues import declare_queues, is_amqp
from evalfleet.core.errors import InvalidMessage, JudgeError, StoreUnavailable
from evalfleet.core.message import new_job
from evalfleet.core.metric import load_registry
from evalfleet.core.sample import parse_sample
from evalfleet.core.settings import Settings
from evalfleet.judgesim import RunningSim
from evalfleet.store import DeadLetter, SqlStore, VerdictKey, VerdictRecord
from tests.brokers import EVERY_BROKER, broker_idle, fleet_state
from tests.helpers import WorkerProcess, allow_connections, evaluator_options, wait_until
from workers.app import create_app
from workers.evaluation import Evaluator
from workers.judge import AsyncHttpJudge, JudgeClient, JudgeFleet, JudgeReply, JudgeRequest
from workers.judge.base import Answered
from workers.save_message import SAVE_TASK, UnsavedBatch, decode_save, encode_save

NOW = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)


def record(sample_id: str, **changes: Any) -> VerdictRecord:
    fields: dict[str, Any] = {
        "key": VerdictKey(sample_id, "rag_qa", "v1", "judge-sim"), "status": "ok",
        "error_class": None, "error": None, "reason": "{x} {{ y }} <score>5</score>",
        "scores": {"faithfulness": 0.5, "semantic_similarity": None},
        "raw_scores": {"faithfulness": 0.5, "semantic_similarity": "N/A"},
        "raw_output": '{"faithfulness": 0.5}\u2028', "attempts": 2, "latency_ms": 12,
        "prompt_tokens": 10, "completion_tokens": None, "attributes": {"app": "bot"},
        "sample_ts": NOW, "created_at": NOW, "cost_usd": 0.001,
    }
    return VerdictRecord(**{**fields, **changes})


def unsaved(count: int = 2) -> UnsavedBatch:
    jobs = [new_job("rag_qa", parse_sample({"id": f"s-{n}", "input": "q", "output": "a"}))
            for n in range(count)]
    letter = DeadLetter(sample_id="s-x", metric="rag_qa", error_class="judge_rejected",
                        error="400", attempts=1, payload={"any": ["json", 1]}, created_at=NOW,
                        history=[{"attempt": 1}], verdict_key="ab" * 32)
    return UnsavedBatch(owner="message-1", verdicts=tuple(record(f"s-{n}") for n in range(count)),
                        jobs=tuple(jobs), dead_letters=(letter,),
                        release=(VerdictKey("s-y", "rag_qa", "v1", "judge-sim"),))


def test_a_save_message_reads_back_as_written() -> None:
    batch = unsaved()
    assert decode_save(encode_save(batch)) == batch
    assert batch.metric == "rag_qa"
    # A cascade's verdict keeps how it was reached through the save message.
    cascade = {"tier": 1, "model": "small", "confidence": 0.93, "low_confidence": False,
               "tried": [{"tier": 1, "model": "small", "scores": {"faithfulness": None}}]}
    with_cascade = dataclasses.replace(batch, verdicts=(record("s-0", cascade=cascade),
                                                        *batch.verdicts[1:]))
    assert decode_save(encode_save(with_cascade)) == with_cascade


@pytest.mark.parametrize("body", [
    None, [], "save", {"v": 2}, {"v": 1}, {"v": 1, "owner": "o", "verdicts": [{}],
                                            "dead_letters": [], "release": []},
    {"v": 1, "owner": "o", "verdicts": [], "dead_letters": [{"created_at": "yesterday"}],
     "release": []},
    {"v": 1, "owner": "o", "verdicts": [], "dead_letters": [], "release": [{"x": 1}]},
    {"v": 1, "owner": "o", "verdicts": "abc", "dead_letters": [], "release": []},
])
def test_a_body_that_is_no_save_message_is_refused(body: Any) -> None:
    with pytest.raises(InvalidMessage):
        decode_save(body)


def test_fields_a_newer_writer_adds_are_dropped_and_missing_defaults_filled() -> None:
    body = encode_save(unsaved(1))
    body["verdicts"][0]["record"]["judge_mood"] = "cheerful"
    del body["verdicts"][0]["record"]["cost_usd"]
    (read,) = decode_save(body).verdicts
    assert read == record("s-0", cost_usd=None)


class _DatabaseGoesAway(JudgeClient):
    """Answers through ``judge``, but first stops the database taking connections."""

    def __init__(self, judge: JudgeClient, *, admin_url: str, database: str) -> None:
        self.judge, self.admin_url, self.database = judge, admin_url, database

    def complete_many(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply | JudgeError]:
        allow_connections(self.admin_url, self.database, allow=False)
        return self.judge.complete_many(requests)


class _DatabaseGoesAwayMidway(JudgeClient):
    """Hands the answers of ``judge`` over one by one, and stops the database taking
    connections once the first is taken (it is stored by then)."""

    def __init__(self, judge: JudgeClient, *, admin_url: str, database: str) -> None:
        self.judge, self.admin_url, self.database = judge, admin_url, database

    def complete_many(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply | JudgeError]:
        return self.judge.complete_many(requests)

    def answers(self, requests: Sequence[JudgeRequest], *,
                gather_s: float = 0.0) -> Iterator[list[Answered]]:
        taken = 0
        for chunk in self.judge.answers(requests):
            for answered in chunk:
                if taken == 1:
                    allow_connections(self.admin_url, self.database, allow=False)
                taken += 1
                yield [answered]


@pytest.fixture(params=["before", "midway"])
def outage(request: pytest.FixtureRequest, store: SqlStore, database_url: str,
           sim: RunningSim) -> Iterator[Evaluator]:
    """An evaluator whose database stops taking connections while the judge answers:
    before the first answer, or once the first answer is stored."""
    database = database_url.rsplit("/", 1)[1]
    admin_url = database_url.rsplit("/", 1)[0].replace("+psycopg", "") + "/postgres"
    runner = JudgeFleet(AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=5,
                                        max_connections=8), concurrency=8)
    going = _DatabaseGoesAway if request.param == "before" else _DatabaseGoesAwayMidway
    judge = going(runner, admin_url=admin_url, database=database)
    try:
        yield Evaluator(registry=load_registry(), store=store, judge=judge,
                        options=evaluator_options(judge_model="judge-sim"))
    finally:
        allow_connections(admin_url, database, allow=True)
        runner.close()


def _jobs(count: int) -> list[Any]:
    return [new_job("rag_qa", parse_sample({
        "id": f"req-{n}", "input": f"How long is the refund window, case {n}?",
        "output": "30 days.", "context": ["Refunds are accepted within 30 days."],
    })) for n in range(count)]


def test_verdicts_judged_when_the_database_went_away_are_handed_over_not_judged_again(
    outage: Evaluator, store: SqlStore, sim: RunningSim, database_url: str,
) -> None:
    kept: list[UnsavedBatch] = []
    outcomes = outage.run_batch(_jobs(3), owner="delivery-1", keep=kept.append)
    stored_before = [r.key.sample_id for r in _verdicts_while_away(store, database_url)]
    kinds = [outcome.kind for outcome in outcomes]
    assert kinds == ["stored" if f"req-{n}" in stored_before else "kept" for n in range(3)]
    assert len(stored_before) == (0 if isinstance(outage.judge, _DatabaseGoesAway) else 1)
    assert all(batch.owner == "delivery-1" for batch in kept)
    assert all([job.sample.id for job in batch.jobs] == [r.key.sample_id for r in batch.verdicts]
               for batch in kept)
    assert sorted([*stored_before, *(r.key.sample_id for batch in kept
                                     for r in batch.verdicts)]) == ["req-0", "req-1", "req-2"]
    for batch in kept:
        again = decode_save(encode_save(batch))  # as the save task reads it
        assert store.save(verdicts=again.verdicts, dead_letters=again.dead_letters,
                          release=again.release, owner=again.owner) == len(again.verdicts)
        assert store.save(verdicts=again.verdicts, owner=again.owner) == 0  # idempotent
    assert sorted(r.key.sample_id for r in store.iter_verdicts()) == ["req-0", "req-1",
                                                                      "req-2"]
    assert sim.stats()["requests"] == 3


def _verdicts_while_away(store: SqlStore, database_url: str) -> list[VerdictRecord]:
    """Let the database take connections again; the verdicts it held before."""
    database = database_url.rsplit("/", 1)[1]
    allow_connections(database_url.rsplit("/", 1)[0].replace("+psycopg", "") + "/postgres",
                       database, allow=True)
    return list(store.iter_verdicts())


def test_without_a_way_to_keep_them_the_outage_is_raised(outage: Evaluator) -> None:
    with pytest.raises(StoreUnavailable):
        outage.run_batch(_jobs(2), owner="delivery-2")


def test_when_keeping_fails_the_outage_is_raised(outage: Evaluator) -> None:
    def broker_down(batch: UnsavedBatch) -> None:
        raise ConnectionError("broker down too")

    with pytest.raises(StoreUnavailable):
        outage.run_batch(_jobs(2), owner="delivery-3", keep=broker_down)


@EVERY_BROKER
def test_a_worker_stores_a_save_message_once_however_often_it_is_delivered(
    settings: Settings, start_worker: Callable[..., WorkerProcess], store: SqlStore,
    sim: RunningSim,
) -> None:
    batch = unsaved(2)
    app = create_app(settings, concurrency=1, queues=["eval.rag_qa"])
    if is_amqp(settings):  # the quorum queue as workers declare it
        with app.connection_for_write() as connection:
            declare_queues(connection, app.conf.task_queues)
    for _ in range(2):
        app.send_task(SAVE_TASK, args=[encode_save(batch)], queue="eval.rag_qa")
    app.send_task(SAVE_TASK, args=[{"v": 1, "owner": "o"}], queue="eval.rag_qa")
    app.close()
    worker = start_worker(settings, queues=["rag_qa"], concurrency=4)
    try:
        wait_until(lambda: store.counts().dead_letters == 2, timeout_s=30,
                   what="the batch's dead letter and the unreadable message's")
        wait_until(lambda: broker_idle(settings, worker), timeout_s=30, what="an idle broker")
        assert sorted(r.key.sample_id for r in store.iter_verdicts()) == ["s-0", "s-1"]
        letters = sorted(letter.error_class for letter in store.iter_dead_letters())
        assert letters == ["invalid_message", "judge_rejected"]
    except AssertionError as exc:  # failed once on a loaded machine: say what was left
        raise AssertionError(f"{exc}\n{fleet_state(settings, store, [worker])}") from None
    assert sim.stats()["requests"] == 0
