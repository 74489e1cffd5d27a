"""Batch judging from spool to verdict: Postgres, the simulator over HTTP, the worker's
own evaluator. Kill points are driven at the function level: the submitter's ``step``
hook raises where a SIGKILL would have stopped it, and a fresh submitter takes over."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from evalfleet.core.errors import JudgeError, RetryLater
from evalfleet.core.message import Job, Purpose, new_job
from evalfleet.core.metric import load_registry
from evalfleet.core.price import ModelPrice, Price
from evalfleet.core.sample import parse_sample
from evalfleet.core.settings import Settings
from evalfleet.judgesim import RunningSim
from evalfleet.store import SqlStore
from evalfleet.store.queries.batchspool import BATCH_OWNER, HELD_UNTIL, BatchSpool
from evalfleet.store.schema import claims, judge_batch_spool
from tests.helpers import evaluator_options, poison
from tests.test_fleet import cli
from workers.batchjudge.api import BatchApi, batch_object
from workers.batchjudge.collector import (
    Collector,
    CollectReport,
    collecting_evaluator,
    read_lines,
)
from workers.batchjudge.gauges import BatchGauges
from workers.batchjudge.mode import SpoolingMode
from workers.batchjudge.submitter import STEPS, BatchLimits, Submitter
from workers.evaluation import INTERNAL_ERROR, Evaluator
from workers.judge import AsyncHttpJudge, JudgeClient, JudgeFleet
from workers.judge.base import JudgeReply
from workers.judge.formats import FormatSupport
from workers.judge.registry import batch_dialect
from workers.shutdown import ShutdownDeadline

PRICES = {"judge-sim": (1.0, 2.0)}
#: The same, as the collector takes them (the fleet's batch share of 0.5).
RESOLVED_PRICES = {"judge-sim": Price(1.0, 2.0, 1.0, 0.5)}
GOOD_RAG = ('{"faithfulness": 0.9, "context_relevance": 0.8, "answer_relevance": 1.0, '
            '"semantic_similarity": 0.7, "evaluation_status": "success", "reason": null, '
            '"error": null}')


class Killed(BaseException):
    """Stands for a SIGKILL at a submitter step."""


class NoSyncCalls(JudgeClient):
    """The worker's synchronous judge: batch-mode jobs must never reach it."""

    def complete_many(self, requests: Any) -> list[Any]:
        raise AssertionError(f"{len(requests)} synchronous judge call(s)")


def killed_at(name: str) -> Callable[[str], None]:
    """A submitter's or collector's step hook that dies where step ``name`` is done."""
    def step(at: str) -> None:
        if at == name:
            raise Killed(at)

    return step


def clock() -> datetime:
    return datetime.now(UTC)


def jobs(n: int, *, metric: str = "rag_qa", purpose: Purpose = "production") -> list[Job]:
    return [new_job(metric, parse_sample({
        "id": f"s-{i}", "input": f"Question {i}?", "output": f"Answer {i}.",
        "context": [f"Fact {i}."], "reference": f"Answer {i}."}), purpose=purpose)
        for i in range(n)]


@pytest.fixture
def api(sim: RunningSim) -> Iterator[BatchApi]:
    client = BatchApi(sim.base_url, timeout_s=10)
    yield client
    client.close()


@pytest.fixture
def worker(store: SqlStore) -> Evaluator:
    """A worker's evaluator with rag_qa in batch mode."""
    options = evaluator_options(judge_model="judge-sim", batch_metrics=["rag_qa"],
                                model_prices=PRICES, max_attempts=3)
    return Evaluator(registry=load_registry(), store=store, judge=NoSyncCalls(),
                     options=options, batch=SpoolingMode(BatchSpool(store)))


def submitter(store: SqlStore, api: BatchApi, *, step: Any = None,
              max_requests: int = 1000) -> Submitter:
    return Submitter(BatchSpool(store), api, BatchLimits(max_requests, 10_000_000, 0.0),
                     clock=clock, step=step)


def collector(store: SqlStore, api: BatchApi, worker: Evaluator,
              published: list[Job]) -> Collector:
    evaluator, answers = collecting_evaluator(worker, endpoint=api.base_url)
    return Collector(BatchSpool(store), api, evaluator=evaluator, answers=answers,
                     publish=lambda job, _countdown: published.append(job), clock=clock,
                     failed_retry_s=0.0, prices=RESOLVED_PRICES)


def collect_all(coll: Collector, store: SqlStore, *, rounds: int = 400) -> CollectReport:
    """Collect until no batch is open (bounded)."""
    total = CollectReport()
    for _ in range(rounds):
        report = coll.run()
        total.batches_finished += report.batches_finished
        total.batches_given_back += report.batches_given_back
        for kind, n in report.outcomes.items():
            total.outcomes[kind] = total.outcomes.get(kind, 0) + n
        if not BatchSpool(store).batches("open"):
            return total
    raise AssertionError("batches still open")


def spool_jobs(worker: Evaluator, batch: list[Job], owner: str = "msg-1") -> None:
    outcomes = worker.run_batch(batch, owner=owner)
    assert {o.kind for o in outcomes} == {"spooled"}


def test_spooled_jobs_hold_their_claims_and_end_as_one_verdict_each(
        store: SqlStore, api: BatchApi, worker: Evaluator, sim: RunningSim) -> None:
    sim.configure(batch_turnaround_s=0.1)
    spool_jobs(worker, jobs(120))
    with store.connect() as conn:
        held = conn.execute(select(claims.c.owner, claims.c.expires_at)).all()
    assert len(held) == 120 and {(o, e.year) for o, e in held} == {(BATCH_OWNER,
                                                                    HELD_UNTIL.year)}
    # A redelivered copy finds the keys held by the batch: a duplicate, never spooled twice.
    assert {o.kind for o in worker.run_batch(jobs(3), owner="msg-2")} == {"duplicate"}
    assert submitter(store, api, max_requests=50).run() == 120
    published: list[Job] = []
    report = collect_all(collector(store, api, worker, published), store)
    assert report.outcomes == {"stored": 120} and not published
    verdicts = list(store.iter_verdicts())
    assert len(verdicts) == 120 and len({v.key for v in verdicts}) == 120
    assert all(v.status == "ok" for v in verdicts)
    assert all(v.cost_usd == pytest.approx(
        ((v.prompt_tokens or 0) * 1.0 + (v.completion_tokens or 0) * 2.0) / 2e6)
        and v.cost_usd for v in verdicts)  # half the synchronous price
    assert {v.judge_mode for v in verdicts} == {"batch"}
    cost, saved = BatchSpool(store).saved()
    assert cost == pytest.approx(sum(v.cost_usd or 0 for v in verdicts)) and saved == (
        pytest.approx(cost))  # half price: saved as much as it cost
    stats = sim.stats()["batches"]
    assert stats["created"] == 3 and stats["lines_judged"] == 120
    assert stats["repeated_custom_ids"] == 0
    with store.connect() as conn:
        assert conn.execute(select(claims)).all() == []
    assert BatchSpool(store).summary().waiting == 0


@pytest.mark.parametrize("kill_after", STEPS)
def test_a_submitter_killed_at_any_step_loses_nothing_and_sends_nothing_twice(
        kill_after: str, store: SqlStore, api: BatchApi, worker: Evaluator,
        sim: RunningSim) -> None:
    sim.configure(batch_turnaround_s=0.05)
    spool_jobs(worker, jobs(40))

    with pytest.raises(Killed):
        submitter(store, api, step=killed_at(kill_after)).run()
    assert submitter(store, api).run() == 0  # the next round finishes the batch in doubt
    published: list[Job] = []
    collect_all(collector(store, api, worker, published), store)
    assert len(list(store.iter_verdicts())) == 40 and not published
    stats = sim.stats()["batches"]
    assert stats["created"] == 1 and stats["lines_accepted"] == 40
    assert stats["repeated_custom_ids"] == 0


def test_an_expired_batch_sends_back_only_what_it_left_undone(
        store: SqlStore, api: BatchApi, worker: Evaluator, sim: RunningSim) -> None:
    sim.configure(batch_turnaround_s=0.05, batch_expire_done_share=0.6)
    spool_jobs(worker, jobs(100))
    submitter(store, api).run()
    published: list[Job] = []
    report = collect_all(collector(store, api, worker, published), store)
    assert report.outcomes == {"stored": 60, "retry": 40}
    stored_ids = {v.key.sample_id for v in store.iter_verdicts()}
    assert len(stored_ids) == 60 and len(published) == 40
    assert all(job.attempt == 2 and job.history[-1].error_class == "judge_unavailable"
               and "expired" in job.history[-1].error for job in published)
    assert not stored_ids & {job.sample.id for job in published}
    # Back in the queue, the jobs are spooled again (their claims were released).
    sim.configure(batch_expire_done_share=None)
    spool_jobs(worker, published, owner="msg-2")
    submitter(store, api).run()
    collect_all(collector(store, api, worker, []), store)
    assert len(list(store.iter_verdicts())) == 100
    assert sim.stats()["batches"]["lines_accepted"] == 140


def test_failed_lines_come_back_with_their_attempt_counted(
        store: SqlStore, api: BatchApi, worker: Evaluator, sim: RunningSim) -> None:
    sim.configure(batch_turnaround_s=0.05, batch_line_error_rate=0.3, seed=7)
    spool_jobs(worker, jobs(60))
    submitter(store, api).run()
    published: list[Job] = []
    report = collect_all(collector(store, api, worker, published), store)
    verdicts = list(store.iter_verdicts())
    assert report.outcomes["retry"] == len(published) > 0
    assert len(verdicts) + len(published) == 60
    assert all(job.attempt == 2 for job in published)


@pytest.mark.parametrize("step", ["_judgement", "parse_verdict"])
def test_a_line_whose_judgement_raises_is_its_own_dead_letter_and_the_round_goes_on(
        step: str, store: SqlStore, api: BatchApi, worker: Evaluator, sim: RunningSim,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug met by one line, in its conclusion or in its parse (all 30 lines in one
    chunk of the collector's delivery), costs that job alone."""
    sim.configure(batch_turnaround_s=0.05)
    spool_jobs(worker, jobs(30))
    submitter(store, api).run()
    poison(monkeypatch, step, sample_id="s-13", error=ZeroDivisionError("poisoned line"))
    published: list[Job] = []
    coll = collector(store, api, worker, published)
    assert coll.chunk >= 30
    report = collect_all(coll, store)
    assert report.outcomes == {"stored": 29, "dead_letter": 1} and not published
    assert {v.key.sample_id for v in store.iter_verdicts()} == {
        f"s-{i}" for i in range(30)} - {"s-13"}
    (letter,) = store.iter_dead_letters()
    assert (letter.sample_id, letter.error_class) == ("s-13", INTERNAL_ERROR)
    assert "ZeroDivisionError: poisoned line" in letter.error
    assert letter.verdict_key is not None
    with store.connect() as conn:  # the poisoned job's claim goes with the others'
        assert conn.execute(select(claims)).all() == []
    # The spool is settled and the next round runs: batch judging goes on.
    assert BatchSpool(store).summary().waiting == 0
    spool_jobs(worker, jobs(33)[30:], owner="msg-2")
    submitter(store, api).run()
    assert collect_all(coll, store).outcomes == {"stored": 3}
    assert collect_all(collector(store, api, worker, []), store).outcomes == {}


def test_a_batch_failed_without_running_is_resubmitted_without_an_attempt(
        store: SqlStore, api: BatchApi, worker: Evaluator, sim: RunningSim) -> None:
    sim.configure(batch_turnaround_s=0.05, batch_enqueued_token_limit=10)
    spool_jobs(worker, jobs(20))
    submitter(store, api).run()
    published: list[Job] = []
    coll = collector(store, api, worker, published)
    assert collect_all(coll, store).batches_given_back == 1
    assert BatchSpool(store).summary().waiting == 20 and not published
    sim.configure(batch_enqueued_token_limit=None)
    assert submitter(store, api).run() == 20
    collect_all(coll, store)
    verdicts = list(store.iter_verdicts())
    assert len(verdicts) == 20 and {v.attempts for v in verdicts} == {1}


def test_a_metric_or_a_purpose_selects_batch_mode(store: SqlStore) -> None:
    options = evaluator_options(judge_model="judge-sim", batch_metrics=["rag_qa"],
                                batch_purposes=["shadow"])
    registry = load_registry()
    rag, faithfulness = registry.get("rag_qa"), registry.get("rec_faithfulness")
    assert options.in_batch_mode(jobs(1)[0], rag)
    assert not options.in_batch_mode(jobs(1, metric="rec_faithfulness")[0], faithfulness)
    assert options.in_batch_mode(jobs(1, metric="rec_faithfulness", purpose="shadow")[0],
                                 faithfulness)
    by_file = faithfulness.spec.model_copy(update={"judge": faithfulness.spec.judge
                                                   .model_copy(update={"mode": "batch"})})
    no_settings = evaluator_options(judge_model="judge-sim")
    assert no_settings.in_batch_mode(jobs(1, metric="rec_faithfulness")[0],
                                     dataclasses.replace(faithfulness, spec=by_file))


def test_hostile_output_lines_are_named_and_the_rest_goes_on() -> None:
    answers: dict[str, Any] = {}
    data = (b'{"custom_id": "a", "response": {"status_code": 200, "body": {"choices": [{'
            b'"message": {"content": "x"}, "finish_reason": "stop"}]}}, "error": null}\n'
            b'not json\n[1]\n{"custom_id": 5}\n'
            b'{"custom_id": "b", "response": {"status_code": 200, "body": "no"}}\n'
            b'{"custom_id": "c", "response": null, "error": {"code": "batch_expired"}}\n')
    assert read_lines(data, answers, batch="b1", latency_ms=1) == 3
    assert isinstance(answers["a"], JudgeReply) and answers["a"].text == "x"
    assert not isinstance(answers["b"], JudgeReply)
    assert "batch_expired" in str(answers["c"])



def test_cancelled_batches_send_back_what_they_left_undone_and_gauges_show_it(
        store: SqlStore, api: BatchApi, worker: Evaluator, sim: RunningSim,
        settings: Settings) -> None:
    sim.configure(batch_turnaround_s=60)
    spool_jobs(worker, jobs(30))
    submitter(store, api).run()
    families = {f.name: f for f in BatchGauges(BatchSpool(store)).collect()}
    assert families["evalfleet_batch_open"].samples[0].value == 1
    requests = {s.labels["state"]: s.value for s in families["evalfleet_batch_requests"].samples}
    assert requests["total"] == 30
    assert {s.labels["where"]: s.value for s in families["evalfleet_batch_jobs"].samples} == {
        "waiting": 0, "in_batch": 30}
    assert families["evalfleet_batch_oldest_job_age_seconds"].samples[0].value >= 0
    result = cli(settings, "batches", "cancel")
    assert result.exit_code == 0, result.output
    assert "1 open batch(es) asked to cancel" in result.stderr
    published: list[Job] = []
    report = collect_all(collector(store, api, worker, published), store)
    assert report.outcomes == {"retry": 30} and len(published) == 30
    assert all(job.attempt == 2 and "cancelled" in job.history[-1].error for job in published)


def test_drain_sends_what_waits_and_collects_it(
        store: SqlStore, worker: Evaluator, sim: RunningSim, settings: Settings) -> None:
    sim.configure(batch_turnaround_s=0.1)
    spool_jobs(worker, jobs(25))
    fleet = settings.model_copy(update={"batch_metrics": ["rag_qa"],
                                        "batch_max_wait_s": 3600.0, "judge_model": "judge-sim",
                                        "model_prices": {"judge-sim": ModelPrice(
                                            input=1.0, output=2.0)}})
    result = cli(fleet, "batches", "drain", "--interval", "0.1", "--timeout", "30")
    assert result.exit_code == 0, result.output
    assert "drained" in result.stderr
    assert len(list(store.iter_verdicts())) == 25
    status = cli(fleet, "status", "--json", "--sample", "0")
    assert status.exit_code == 0, status.output
    view = json.loads(status.stdout)["batches"]
    assert view["waiting"] == view["in_batches"] == 0 and view["open"] == []
    assert view["saved_usd"] == pytest.approx(view["cost_usd"]) and view["cost_usd"] > 0


class DownloadKilled(BatchApi):
    """Killed mid-download the first time a file is read."""

    killed = False

    def content(self, file_id: str) -> bytes:
        if not self.killed:
            self.killed = True
            raise Killed("download")
        return super().content(file_id)


def test_a_collector_killed_mid_download_or_mid_batch_resumes(
        store: SqlStore, api: BatchApi, worker: Evaluator, sim: RunningSim) -> None:
    sim.configure(batch_turnaround_s=0.05)
    spool_jobs(worker, jobs(50))
    submitter(store, api).run()
    published: list[Job] = []
    dying = DownloadKilled(sim.base_url)
    evaluator, answers = collecting_evaluator(worker, endpoint=api.base_url)
    # Killed mid-download, then after the first chunk's verdicts are stored and before
    # its spool rows go.
    for batch_api, step in ((dying, None), (api, killed_at("stored"))):
        killed = Collector(BatchSpool(store), batch_api, evaluator=evaluator, answers=answers,
                           publish=lambda job, _c: published.append(job), clock=clock,
                           failed_retry_s=0.0, prices=RESOLVED_PRICES, chunk=20, step=step)
        with pytest.raises(Killed):
            collect_all(killed, store)
    dying.close()
    assert 0 < len(list(store.iter_verdicts())) < 50  # the first chunk was stored
    report = collect_all(collector(store, api, worker, published), store)
    assert report.outcomes == {"duplicate": 20, "stored": 30} and not published
    verdicts = list(store.iter_verdicts())
    assert len(verdicts) == 50
    assert sim.stats()["batches"]["lines_judged"] == 50
    # The chunk judged twice is priced once: the batch's cost is its 50 verdicts'.
    cost, saved = BatchSpool(store).saved()
    assert cost == pytest.approx(sum(v.cost_usd or 0 for v in verdicts)) and cost > 0
    assert saved == pytest.approx(cost)


def test_a_job_sent_back_and_spooled_again_before_its_row_goes_is_kept(
        store: SqlStore, api: BatchApi, worker: Evaluator, sim: RunningSim) -> None:
    sim.configure(batch_turnaround_s=0.05, batch_expire_done_share=0.5)
    spool_jobs(worker, jobs(10))
    submitter(store, api).run()
    spool = BatchSpool(store)
    published: list[Job] = []

    def spool_at_once(job: Job, _countdown: float) -> None:
        # A fast worker takes the job sent back before the collector drops its row.
        published.append(job)
        spool_jobs(worker, [job], owner=f"again-{job.sample.id}")

    evaluator, answers = collecting_evaluator(worker, endpoint=api.base_url)
    collect_all(Collector(spool, api, evaluator=evaluator, answers=answers,
                          publish=spool_at_once, clock=clock, failed_retry_s=0.0,
                          prices=RESOLVED_PRICES), store)
    assert len(published) == 5 and spool.summary().waiting == 5
    sim.configure(batch_expire_done_share=None)
    submitter(store, api).run()
    collect_all(collector(store, api, worker, []), store)
    assert len(list(store.iter_verdicts())) == 10


def test_hostile_sample_text_goes_through_spool_file_and_verdict(
        store: SqlStore, api: BatchApi, worker: Evaluator, sim: RunningSim) -> None:
    sim.configure(batch_turnaround_s=0.05)
    hostile = "nul \x00, lone \ud800, quote \", newline \n, '); DROP TABLE verdicts; --"
    job = new_job("rag_qa", parse_sample({"id": "h-1", "input": hostile, "output": hostile,
                                          "context": [hostile], "reference": hostile}))
    spool_jobs(worker, [job, *jobs(2)])
    assert submitter(store, api).run() == 3
    collect_all(collector(store, api, worker, []), store)
    verdicts = {v.key.sample_id for v in store.iter_verdicts()}
    letters = {d.sample_id for d in store.iter_dead_letters()}
    assert verdicts >= {"s-0", "s-1"}
    # The job ends once, as the synchronous path ends it: today a dead letter (the
    # database refuses a NUL inside the kept sample's JSON, in either mode).
    assert ("h-1" in verdicts) != ("h-1" in letters)
    assert BatchSpool(store).summary().waiting == 0


def reasking_collector(store: SqlStore, api: BatchApi, worker: Evaluator, *,
                       reask_sync: bool = False) -> Collector:
    evaluator, answers = collecting_evaluator(worker, endpoint=api.base_url,
                                              reask_sync=reask_sync)
    return Collector(BatchSpool(store), api, evaluator=evaluator, answers=answers,
                     publish=lambda job, _c: pytest.fail(f"{job.sample.id} sent back"),
                     clock=clock, failed_retry_s=0.0, prices=RESOLVED_PRICES)


@pytest.mark.parametrize("second_also_unusable", [False, True])
def test_an_unusable_batch_reply_is_reasked_once_in_a_later_batch(
        second_also_unusable: bool, store: SqlStore, api: BatchApi, worker: Evaluator,
        sim: RunningSim) -> None:
    # Every first answer is cut off; the re-ask is answered well, or cut off too.
    sim.configure(batch_turnaround_s=0.05, first_answer_fault="truncated",
                  truncated_rate=1.0 if second_also_unusable else 0.0)
    spool_jobs(worker, jobs(6))
    assert submitter(store, api).run() == 6
    coll = reasking_collector(store, api, worker)
    assert collect_all(coll, store).outcomes == {"spooled": 6}
    # The same jobs wait for a later batch under the same keys, their claims still held.
    assert not list(store.iter_verdicts()) and BatchSpool(store).summary().waiting == 6
    with store.connect() as conn:
        assert {o for (o,) in conn.execute(select(claims.c.owner))} == {BATCH_OWNER}
    assert {o.kind for o in worker.run_batch(jobs(6), owner="msg-2")} == {"duplicate"}
    assert submitter(store, api).run() == 6
    assert collect_all(coll, store).outcomes == {"stored": 6}
    assert submitter(store, api).run() == 0  # asked again once, never twice
    verdicts = list(store.iter_verdicts())
    assert len(verdicts) == 6 and {v.attempts for v in verdicts} == {2}
    assert all(v.cost_usd == pytest.approx(
        ((v.prompt_tokens or 0) * 1.0 + (v.completion_tokens or 0) * 2.0) / 2e6)
        for v in verdicts)  # both replies, at the batch price
    # Each batch counts its own lines: the first the unusable replies, the second the
    # re-asks; together what the verdicts cost.
    assert BatchSpool(store).saved()[0] == pytest.approx(sum(v.cost_usd or 0 for v in verdicts))
    if second_also_unusable:
        assert {v.status for v in verdicts} == {"failed"}
        assert all(v.raw_output and "(first reply:" in (v.error or "") for v in verdicts)
    else:
        assert {v.status for v in verdicts} == {"ok"}
    stats = sim.stats()
    assert stats["requests"] == 0 and stats["batches"]["lines_accepted"] == 12
    with store.connect() as conn:
        assert conn.execute(select(claims)).all() == []
    assert BatchSpool(store).summary().waiting == 0


def test_an_unusable_batch_reply_is_reasked_synchronously_by_setting(
        store: SqlStore, api: BatchApi, sim: RunningSim) -> None:
    sim.configure(batch_turnaround_s=0.05, first_answer_fault="truncated")
    sync_judge = JudgeFleet(AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=5,
                                           max_connections=4), concurrency=4)
    options = evaluator_options(judge_model="judge-sim", batch_metrics=["rag_qa"])
    worker = Evaluator(registry=load_registry(), store=store, judge=sync_judge,
                       options=options, batch=SpoolingMode(BatchSpool(store)))
    try:
        spool_jobs(worker, jobs(6))
        submitter(store, api).run()
        collect_all(reasking_collector(store, api, worker, reask_sync=True), store)
    finally:
        sync_judge.close()
    verdicts = list(store.iter_verdicts())
    assert len(verdicts) == 6 and {v.status for v in verdicts} == {"ok"}
    assert {v.attempts for v in verdicts} == {2}
    stats = sim.stats()
    assert stats["requests"] == 6 and stats["batches"]["lines_accepted"] == 6


def sync_worker(store: SqlStore, sim: RunningSim, **fleet: Any) -> Evaluator:
    """A worker's evaluator with rag_qa in batch mode and a judge fleet (its layers are
    what the collector's fleet shares); close its judge."""
    judge = JudgeFleet(AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=5,
                                      max_connections=2), concurrency=2, **fleet)
    return Evaluator(registry=load_registry(), store=store, judge=judge,
                     options=evaluator_options(judge_model="judge-sim", batch_metrics=["rag_qa"]),
                     batch=SpoolingMode(BatchSpool(store), formats=judge.formats))


def test_a_batch_line_refusing_its_response_format_steps_it_down_for_the_next_batch(
        store: SqlStore, api: BatchApi, sim: RunningSim) -> None:
    sim.configure(batch_turnaround_s=0.05, refused_response_formats=("json_schema",))
    formats = FormatSupport("json_schema")
    worker = sync_worker(store, sim, formats=formats)
    try:
        spool_jobs(worker, jobs(4))
        submitter(store, api).run()
        published: list[Job] = []
        report = collect_all(collector(store, api, worker, published), store)
        # A refusal is an answer: the mode steps down fleet-wide, the jobs go back to their
        # queue with no attempt counted, nothing is dead-lettered.
        assert report.outcomes == {"paused": 4}
        assert formats.mode_for("judge-sim") != "json_schema"
        assert len(published) == 4 and {job.attempt for job in published} == {1}
        assert not list(store.iter_verdicts()) and not list(store.iter_dead_letters())
        # Spooled again, their lines go in the lower format and get their verdicts.
        spool_jobs(worker, published, owner="msg-2")
        assert all(body["response_format"]["type"] != "json_schema"
                   for _, body in pending_lines(store))
        submitter(store, api).run()
        assert collect_all(collector(store, api, worker, []), store).outcomes == {"stored": 4}
    finally:
        worker.judge.close()
    assert sim.stats()["requests"] == 0


def pending_lines(store: SqlStore) -> list[tuple[str, dict[str, Any]]]:
    """The request bodies of the spooled jobs no batch holds yet."""
    with store.connect() as conn:
        return [(key, json.loads(body)) for key, body in conn.execute(
            select(judge_batch_spool.c.key, judge_batch_spool.c.body)
            .where(judge_batch_spool.c.batch.is_(None)))]


def test_a_collector_past_the_shutdown_deadline_ends_its_round_and_keeps_the_batch(
        store: SqlStore, api: BatchApi, sim: RunningSim) -> None:
    sim.configure(batch_turnaround_s=0.05)
    deadline = ShutdownDeadline()
    worker = sync_worker(store, sim, deadline=deadline)
    try:
        spool_jobs(worker, jobs(5))
        submitter(store, api).run()
        published: list[Job] = []
        coll = collector(store, api, worker, published)
        deadline.expire()
        with pytest.raises(RetryLater, match="shutting down"):
            collect_all(coll, store)
    finally:
        worker.judge.close()
    # Nothing judged, nothing sent back: the batch's jobs wait for the next process.
    assert not published and not list(store.iter_verdicts())
    assert BatchSpool(store).summary().in_batches == 5
    again = sync_worker(store, sim)
    try:
        assert collect_all(collector(store, api, again, []), store).outcomes == {"stored": 5}
    finally:
        again.judge.close()


def test_a_request_over_the_file_limit_alone_is_dead_lettered_naming_job_and_limit(
        store: SqlStore, api: BatchApi, worker: Evaluator, sim: RunningSim) -> None:
    sim.configure(batch_turnaround_s=0.05)
    huge = new_job("rag_qa", parse_sample({"id": "huge-1", "input": "Q?", "output": "A.",
                                           "context": ["x" * 30_000], "reference": "A."}))
    spool_jobs(worker, [huge, *jobs(3)])
    limits = BatchLimits(1000, 20_000, 0.0)
    assert Submitter(BatchSpool(store), api, limits, clock=clock).run() == 3
    letters = list(store.iter_dead_letters())
    assert [(d.sample_id, d.error_class) for d in letters] == [
        ("huge-1", "batch_request_too_large")]
    assert "'huge-1'" in letters[0].error and "20000 bytes" in letters[0].error
    # Never given back: the next rounds send nothing, and the key is settled.
    assert Submitter(BatchSpool(store), api, limits, clock=clock).run() == 0
    assert BatchSpool(store).summary().waiting == 0
    assert {o.kind for o in worker.run_batch([huge], owner="msg-2")} == {"duplicate"}
    collect_all(collector(store, api, worker, []), store)
    assert len(list(store.iter_verdicts())) == 3
    assert sim.stats()["batches"]["lines_accepted"] == 3


@pytest.mark.parametrize("flavor", ["azure", "together", "groq"])
def test_each_provider_flavor_is_served_through_its_paths_and_purpose(
        flavor: str, store: SqlStore, worker: Evaluator, sim: RunningSim) -> None:
    sim.configure(batch_turnaround_s=0.05, batch_flavor="openai" if flavor == "groq" else flavor)
    root = sim.base_url.removesuffix("/v1")
    base_url = f"{root}/openai" if flavor == "azure" else sim.base_url
    flavored = BatchApi(base_url, api_key="k", timeout_s=10,
                        dialect=batch_dialect(flavor, api_version="2024-10-21"))
    try:
        if flavor != "groq":  # the simulator refuses OpenAI's own shape as this provider
            with pytest.raises(JudgeError):
                BatchApi(sim.base_url, timeout_s=10).upload(b"{}\n", filename="x.jsonl")
        if flavor == "azure":  # the key as a bearer token, not in api-key: refused
            bearer = httpx.post(f"{base_url}/files?api-version=2024-10-21",
                                headers={"authorization": "Bearer k"},
                                files={"file": ("x.jsonl", b"{}\n")}, data={"purpose": "batch"})
            assert bearer.status_code == 401, bearer.text
        spool_jobs(worker, jobs(5))
        assert submitter(store, flavored).run() == 5
        collect_all(collector(store, flavored, worker, []), store)
    finally:
        flavored.close()
    assert len(list(store.iter_verdicts())) == 5
    batches = sim.stats()["batches"]
    assert batches["created"] == 1 and batches["lines_judged"] == 5


def test_together_batch_objects_read_as_openai_ones() -> None:
    wrapped = {"job": {"id": "b1", "status": "IN_PROGRESS", "input_file_id": "f1"}}
    assert batch_object(wrapped) == {"id": "b1", "status": "in_progress", "input_file_id": "f1"}
    assert batch_object({"id": "b2", "status": "completed"})["status"] == "completed"
