"""Session versions judged through a Batch API: a final job that comes while the batch
still holds the idle version's key (spooled, or sent and not collected) makes the
verdict the batch later saves final, whatever path the job takes back. Postgres, the
simulator's Batch API over HTTP, the worker's own evaluator."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from evalfleet.core.message import Job, new_job
from evalfleet.core.metric import load_registry
from evalfleet.judgesim import RunningSim
from evalfleet.store import SqlStore
from evalfleet.store.queries.batchspool import BatchSpool
from evalfleet.store.schema import pending_finals
from tests.helpers import evaluator_options
from tests.workers.batchjudge.test_batch_flow import (  # noqa: F401 (api is a fixture)
    PRICES,
    NoSyncCalls,
    api,
    collect_all,
    collector,
    submitter,
)
from tests.workers.test_session_metric import scored_sample_ids, session_sample, turn
from workers.batchjudge.api import BatchApi
from workers.batchjudge.mode import SpoolingMode
from workers.evaluation import Evaluator

METRIC = "conversation_goal_completion"


@pytest.fixture
def worker(store: SqlStore) -> Evaluator:
    """A worker's evaluator with a session metric in batch mode."""
    options = evaluator_options(judge_model="judge-sim", batch_metrics=[METRIC],
                                model_prices=PRICES, max_attempts=3)
    return Evaluator(registry=load_registry(), store=store, judge=NoSyncCalls(),
                     options=options, batch=SpoolingMode(BatchSpool(store)))


def versions(n: int, closed_by: str) -> list[Any]:
    return [session_sample([turn(3 * s), turn(3 * s + 1)], f"conv-{s}", closed_by=closed_by)
            for s in range(n)]


def pending(store: SqlStore) -> list[str]:
    with store.engine.connect() as conn:
        return sorted(conn.execute(select(pending_finals.c.sample_id)).scalars())


@pytest.mark.parametrize("final_comes", ["spooled", "sent"])
def test_a_final_job_while_the_batch_holds_the_key_makes_its_verdict_final(
        final_comes: str, store: SqlStore, api: BatchApi, worker: Evaluator,  # noqa: F811
        sim: RunningSim) -> None:
    sim.configure(batch_turnaround_s=0.05)
    idle = versions(3, "idle")
    outcomes = worker.run_batch([new_job(METRIC, s) for s in idle], owner="msg-1")
    assert {o.kind for o in outcomes} == {"spooled"}
    if final_comes == "sent":
        assert submitter(store, api).run() == 3
    # conv-0 past its final wait, conv-1 ended with nothing new; conv-2 still may change.
    finals = [session_sample([turn(0), turn(1)], "conv-0", closed_by="final_wait"),
              session_sample([turn(3), turn(4)], "conv-1", closed_by="end")]
    assert [f.id for f in finals] == [s.id for s in idle[:2]]
    outcomes = worker.run_batch([new_job(METRIC, s) for s in finals], owner="msg-2")
    assert {o.kind for o in outcomes} == {"duplicate"}
    assert pending(store) == sorted(f.id for f in finals)
    if final_comes == "spooled":
        assert submitter(store, api).run() == 3
    published: list[Job] = []
    assert collect_all(collector(store, api, worker, published), store).outcomes == {
        "stored": 3} and not published
    provisional = {v.key.sample_id: v.provisional for v in store.iter_verdicts()}
    assert provisional == {idle[0].id: False, idle[1].id: False, idle[2].id: True}
    assert scored_sample_ids(store) == sorted(f.id for f in finals)
    assert pending(store) == []
    assert sim.stats()["batches"]["lines_judged"] == 3  # marked, never judged again


def test_a_job_the_batch_sends_back_is_final_when_judged_later(
        store: SqlStore, api: BatchApi, worker: Evaluator, sim: RunningSim) -> None:  # noqa: F811
    """The mark is on the verdict key, not on the spool row: a job whose batch expired
    goes back to its queue as the idle version, is spooled again, and its verdict is
    final all the same."""
    sim.configure(batch_turnaround_s=0.05, batch_expire_done_share=0.0)
    (idle,) = versions(1, "idle")
    worker.run_batch([new_job(METRIC, idle)], owner="msg-1")
    final = session_sample([turn(0), turn(1)], "conv-0", closed_by="final_wait")
    assert worker.run(new_job(METRIC, final), owner="msg-2").kind == "duplicate"
    submitter(store, api).run()
    published: list[Job] = []
    assert collect_all(collector(store, api, worker, published), store).outcomes == {
        "retry": 1}
    assert [job.sample.session.closed_by for job in published  # type: ignore[union-attr]
            ] == ["idle"] and list(store.iter_verdicts()) == []
    sim.configure(batch_expire_done_share=None)
    assert worker.run_batch(published, owner="msg-3")[0].kind == "spooled"
    submitter(store, api).run()
    collect_all(collector(store, api, worker, []), store)
    (verdict,) = store.iter_verdicts()
    assert not verdict.provisional and scored_sample_ids(store) == [idle.id]
    assert pending(store) == []
