"""A judge cascade with a batch tier, from a worker's evaluator through the spool, the
simulator's Batch API and the collector, on Postgres: a batch tier's line gives its
verdict's confidence, which settles the job or sends it on to the next tier (a call
through the synchronous judge, or a later batch), the earlier tiers' answers carried so
no tier is asked twice; a collector stopped between storing and settling leaves one
verdict per job."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from evalfleet.core.cascade import metric_cascade_identity
from evalfleet.core.errors import JudgeError
from evalfleet.core.metric import load_registry
from evalfleet.core.price import cost_usd
from evalfleet.judgesim import RunningSim
from evalfleet.store import SqlStore, VerdictRecord
from evalfleet.store.queries.batchspool import BATCH_OWNER, BatchSpool
from evalfleet.store.queries.cascade import ThresholdBook
from evalfleet.store.schema import claims, judge_batch_spool
from tests.helpers import cascade_metrics, evaluator_options
from tests.workers.batchjudge.test_batch_flow import Killed, clock, collect_all, killed_at
from tests.workers.test_evaluation_cascade import PRICES, jobs
from workers.batchjudge.api import BatchApi
from workers.batchjudge.collector import Collector, collecting_evaluator
from workers.batchjudge.mode import SpoolingMode
from workers.batchjudge.submitter import BatchLimits, Submitter
from workers.cascade import ThresholdCache
from workers.evaluation import Evaluator
from workers.judge import AsyncHttpJudge, JudgeClient, JudgeFleet
from workers.judge.base import JudgeReply, JudgeRequest

JOBS = 30


class Counted(JudgeClient):
    """The worker's synchronous judge, counting the calls per model."""

    def __init__(self, judge: JudgeClient) -> None:
        self.judge = judge
        self.calls: dict[str, int] = {}

    def complete_many(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply | JudgeError]:
        for request in requests:
            self.calls[request.model] = self.calls.get(request.model, 0) + 1
        return self.judge.complete_many(requests)


@pytest.fixture
def sync(sim: RunningSim) -> Iterator[Counted]:
    sim.configure(batch_turnaround_s=0.1,
                  judge_profiles={"small": {"error_rate": 0.1}, "large": {"error_rate": 0.02}})
    fleet = JudgeFleet(AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=5,
                                      max_connections=8), concurrency=8)
    yield Counted(fleet)
    fleet.close()


@pytest.fixture
def api(sim: RunningSim) -> Iterator[BatchApi]:
    client = BatchApi(sim.base_url, timeout_s=10)
    yield client
    client.close()


def worker(store: SqlStore, judge: JudgeClient, tiers: str, tmp_path: Path) -> Evaluator:
    """A worker's evaluator for bbh_match judged by ``tiers``, fitted: the small tier
    settles at 0.85."""
    registry = load_registry(cascade_metrics(tmp_path / "metrics", tiers))
    metric = registry.get("bbh_match")
    ThresholdBook(store).save(metric="bbh_match", identity=metric_cascade_identity(metric),
                              thresholds=[0.85, None], report={}, now=datetime.now(UTC))
    return Evaluator(registry=registry, store=store, judge=judge,
                     options=evaluator_options(judge_model="judge-sim", model_prices=PRICES),
                     batch=SpoolingMode(BatchSpool(store)),
                     thresholds=ThresholdCache(ThresholdBook(store).latest, ttl_s=0.0))


def collector(store: SqlStore, api: BatchApi, run: Evaluator, *, step: Any = None) -> Collector:
    evaluator, answers = collecting_evaluator(run, endpoint=api.base_url)
    return Collector(BatchSpool(store), api, evaluator=evaluator, answers=answers,
                     publish=lambda job, _countdown: None, clock=clock, failed_retry_s=0.0,
                     prices=run.options.prices, step=step)


def send_and_collect(store: SqlStore, api: BatchApi, run: Evaluator) -> None:
    """Send every spooled line and collect until nothing is spooled (bounded)."""
    for _ in range(5):
        Submitter(BatchSpool(store), api, BatchLimits(1000, 10_000_000, 0.0),
                  clock=clock).run()
        collect_all(collector(store, api, run), store)
        if not BatchSpool(store).summary().waiting:
            return
    raise AssertionError("jobs still spooled")


def verdicts(store: SqlStore) -> list[VerdictRecord]:
    return sorted(store.iter_verdicts(), key=lambda record: record.key.sample_id)


def assert_settled_once(store: SqlStore) -> list[VerdictRecord]:
    """One verdict per job, nothing left spooled, no claim held."""
    records = verdicts(store)
    assert len({record.key for record in records}) == len(records) == JOBS
    with store.connect() as conn:
        assert conn.execute(select(judge_batch_spool.c.key)).all() == []
        assert conn.execute(select(claims.c.key).where(claims.c.owner == BATCH_OWNER)
                            ).all() == []
    return records


def test_a_batch_tier_settles_what_it_is_sure_of_and_sends_the_rest_to_the_call_tier(
        store: SqlStore, api: BatchApi, sync: Counted, tmp_path: Path) -> None:
    run = worker(store, sync, "  cascade:\n    - {model: small, mode: batch}\n"
                              "    - {model: large}\n", tmp_path)
    outcomes = run.run_batch(jobs(JOBS), owner="m1")
    assert {outcome.kind for outcome in outcomes} == {"spooled"} and sync.calls == {}
    send_and_collect(store, api, run)
    records = assert_settled_once(store)
    small = [r for r in records if r.cascade and r.cascade["tier"] == 1]
    large = [r for r in records if r.cascade and r.cascade["tier"] == 2]
    assert small and large and len(small) + len(large) == JOBS
    price = run.options.prices["small"]
    for record in small:
        assert record.cascade is not None and record.cascade["confidence"] >= 0.85
        (tried,) = record.cascade["tried"]
        assert (tried["model"], tried["mode"]) == ("small", "batch")
        # A batch line is priced at the batch share.
        assert record.cost_usd == pytest.approx(cost_usd(
            price, prompt_tokens=record.prompt_tokens,
            completion_tokens=record.completion_tokens, cached_tokens=record.cached_tokens,
            batch=True))
    for record in large:
        assert record.cascade is not None
        assert [(t["model"], t["mode"]) for t in record.cascade["tried"]] == [
            ("small", "batch"), ("large", "call")]
        assert record.cascade["tried"][0]["confidence"] < 0.85
        assert record.cost_usd == pytest.approx(
            sum(tried["cost_usd"] for tried in record.cascade["tried"]))
    # The escalated jobs alone reached the synchronous judge, once each.
    assert sync.calls == {"large": len(large)}


def test_a_call_tier_s_unsure_jobs_wait_for_the_batch_tier_and_are_settled_once(
        store: SqlStore, api: BatchApi, sync: Counted, tmp_path: Path) -> None:
    run = worker(store, sync, "  cascade:\n    - {model: small}\n"
                              "    - {model: large, mode: batch}\n", tmp_path)
    outcomes = run.run_batch(jobs(JOBS), owner="m1")
    stored = [o for o in outcomes if o.kind == "stored"]
    spooled = [o for o in outcomes if o.kind == "spooled"]
    assert stored and spooled and len(stored) + len(spooled) == JOBS
    assert sync.calls == {"small": JOBS}
    Submitter(BatchSpool(store), api, BatchLimits(1000, 10_000_000, 0.0), clock=clock).run()
    # Stopped after the verdicts are stored, before the spool rows go: the next round
    # judges the chunk again and finds them stored.
    with pytest.raises(Killed):
        collect_all(collector(store, api, run, step=killed_at("stored")), store)
    assert len(verdicts(store)) == JOBS
    collect_all(collector(store, api, run), store)
    records = assert_settled_once(store)
    large = [r for r in records if r.cascade and r.cascade["tier"] == 2]
    assert len(large) == len(spooled)
    for record in large:
        assert record.cascade is not None and record.judge_mode == "batch"
        small, big = record.cascade["tried"]
        # The small tier's answer the worker got is carried, never asked again.
        assert (small["model"], small["mode"], big["model"], big["mode"]) == (
            "small", "call", "large", "batch")
        assert small["confidence"] < 0.85 and small["scores"] is not None
    assert sync.calls == {"small": JOBS}
    (batch,) = BatchSpool(store).batches("done")
    assert (batch.judge_model, batch.requests) == ("large", len(spooled))


def test_two_batch_tiers_take_two_batches(store: SqlStore, api: BatchApi, sync: Counted,
                                          tmp_path: Path) -> None:
    run = worker(store, sync, "  cascade:\n    - {model: small, mode: batch}\n"
                              "    - {model: large, mode: batch}\n", tmp_path)
    run.run_batch(jobs(JOBS), owner="m1")
    send_and_collect(store, api, run)
    records = assert_settled_once(store)
    large = [r for r in records if r.cascade and r.cascade["tier"] == 2]
    assert large and sync.calls == {}
    for record in large:
        assert record.cascade is not None
        assert [(t["model"], t["mode"]) for t in record.cascade["tried"]] == [
            ("small", "batch"), ("large", "batch")]
    # Each tier's line was sent once: every job in the small tier's batch, the unsure
    # ones in the large tier's.
    done = BatchSpool(store).batches("done")
    assert sorted((b.judge_model, b.requests) for b in done) == [
        ("large", len(large)), ("small", JOBS)]
