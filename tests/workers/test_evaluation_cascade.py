"""A metric with a judge cascade through the evaluator, against Postgres and the simulator
over HTTP: thresholds read from the store, the cheap tier asked first, escalation in the
same delivery, every tier for the review slice's samples, and how a verdict was reached
stored on it and exported."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from evalfleet.core.cascade import CASCADE_PREFIX, metric_cascade_identity
from evalfleet.core.errors import InvalidMetricSpec
from evalfleet.core.message import Job, new_job
from evalfleet.core.metric import load_registry
from evalfleet.core.review_slice import MetricSlice, ReviewSlice, Stratum
from evalfleet.core.sample import parse_sample
from evalfleet.judgesim import RunningSim
from evalfleet.store import SqlStore, VerdictRecord, open_store
from evalfleet.store.queries.cascade import ThresholdBook
from evalfleet.store.queries.export import export_row
from evalfleet.store.queries.review_queue import ReviewQueue
from tests.helpers import cascade_metrics, evaluator_options
from workers.cascade import ThresholdCache
from workers.evaluation import Evaluator
from workers.judge import AsyncHttpJudge, JudgeFleet
from workers.telemetry import Telemetry

PRICES = {"small": [0.1, 0.4], "large": [2.0, 8.0]}


@pytest.fixture
def metrics_dir(tmp_path: Path) -> Path:
    """bbh_match judged by a cascade: ``small`` first, ``large`` behind it."""
    return cascade_metrics(tmp_path / "metrics")


@pytest.fixture
def judge(sim: RunningSim) -> Iterator[JudgeFleet]:
    sim.configure(judge_profiles={"small": {"error_rate": 0.1}, "large": {"error_rate": 0.02}})
    fleet = JudgeFleet(AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=5,
                                      max_connections=8), concurrency=8)
    yield fleet
    fleet.close()


def evaluator(store: SqlStore, judge: JudgeFleet, metrics_dir: Path, *,
              review_rate: float = 0.0) -> Evaluator:
    options = evaluator_options(judge_model="judge-sim", model_prices=PRICES)
    review = ReviewSlice({"bbh_match": MetricSlice(rate=review_rate)}) if review_rate else None
    return Evaluator(registry=load_registry(metrics_dir), store=store, judge=judge,
                     options=replace(options, review=review),
                     thresholds=ThresholdCache(ThresholdBook(store).latest, ttl_s=0.0))


def jobs(count: int) -> list[Job]:
    return [new_job("bbh_match", parse_sample({
        "id": f"cas-{index}", "input": f"Is {index} even?",
        "output": f"Thinking...\n{'True' if index % 2 == 0 else 'False'}",
        "reference": "True" if index % 2 == 0 else "False"})) for index in range(count)]


def verdicts(store: SqlStore) -> list[VerdictRecord]:
    return sorted(store.iter_verdicts(), key=lambda record: record.key.sample_id)


def identity_of(store: SqlStore, judge: JudgeFleet, metrics_dir: Path) -> str:
    run = evaluator(store, judge, metrics_dir)
    metric = load_registry(metrics_dir).get("bbh_match")
    return run.verdict_key(jobs(1)[0], metric).judge_model


def test_before_any_fit_only_the_last_tier_is_asked_and_marked_low_confidence(
        store: SqlStore, judge: JudgeFleet, metrics_dir: Path, sim: RunningSim) -> None:
    # Probes, rate limits and capacity per metric name the model every job reaches.
    assert load_registry(metrics_dir).get("bbh_match").spec.judge.main_model == "large"
    outcomes = evaluator(store, judge, metrics_dir).run_batch(jobs(4), owner="m1")
    assert [outcome.kind for outcome in outcomes] == ["stored"] * 4
    assert sim.stats()["requests"] == 4  # never a guess: no cheap call that cannot settle
    for record in verdicts(store):
        assert record.key.judge_model.startswith(CASCADE_PREFIX)
        assert record.cascade is not None
        assert (record.cascade["tier"], record.cascade["model"]) == (2, "large")
        assert record.cascade["low_confidence"] and record.cascade["thresholds_version"] is None
        assert [tried["model"] for tried in record.cascade["tried"]] == ["large"]
        row = export_row(record)
        assert row["settled_model"] == "large" and row["cascade"] == record.cascade
        assert row["judge_model"] == record.key.judge_model


def test_a_fitted_cheap_tier_settles_what_it_is_sure_of_and_costs_less(
        store: SqlStore, judge: JudgeFleet, metrics_dir: Path) -> None:
    identity = identity_of(store, judge, metrics_dir)
    stored = ThresholdBook(store).save(metric="bbh_match", identity=identity,
                                       thresholds=[0.85, None], report={},
                                       now=datetime.now(UTC))
    assert stored.version == 1
    registry = CollectorRegistry()
    run = evaluator(store, judge, metrics_dir)
    run.telemetry = Telemetry(registry=registry)
    run.run_batch(jobs(40), owner="m1")
    records = verdicts(store)
    assert len(records) == 40
    small = [r for r in records if r.cascade and r.cascade["tier"] == 1]
    large = [r for r in records if r.cascade and r.cascade["tier"] == 2]
    assert small and large  # the simulated small judge is sure of some prompts, not all
    for record in small:
        assert record.cascade is not None and not record.cascade["low_confidence"]
        assert record.cascade["confidence"] >= 0.85
        assert record.cascade["thresholds_version"] == 1
        assert [tried["model"] for tried in record.cascade["tried"]] == ["small"]
        assert record.attempts == 1
    for record in large:
        assert record.cascade is not None
        assert [tried["model"] for tried in record.cascade["tried"]] == ["small", "large"]
        assert record.attempts == 2
        # Every tier tried is paid for: the verdict's cost is the sum of its tiers'.
        assert record.cost_usd == pytest.approx(
            sum(tried["cost_usd"] for tried in record.cascade["tried"]))
    assert max(r.cost_usd or 0 for r in small) < min(r.cost_usd or 0 for r in large)
    # The live share settled per tier, for dashboards.
    counted = {tier: registry.get_sample_value("evalfleet_cascade_verdicts_total", {
        "metric": "bbh_match", "tier": tier, "outcome": outcome})
        for tier, outcome in (("1", "settled"), ("2", "low_confidence"))}
    assert counted == {"1": len(small), "2": len(large)}


def test_a_refit_is_read_by_the_next_delivery_and_never_rejudges_the_past(
        store: SqlStore, judge: JudgeFleet, metrics_dir: Path, sim: RunningSim) -> None:
    run = evaluator(store, judge, metrics_dir)
    first = jobs(3)
    run.run_batch(first, owner="m1")
    identity = identity_of(store, judge, metrics_dir)
    book = ThresholdBook(store)
    book.save(metric="bbh_match", identity=identity, thresholds=[0.0, None], report={},
              now=datetime.now(UTC))
    second = book.save(metric="bbh_match", identity=identity, thresholds=[0.5, None],
                       report={}, now=datetime.now(UTC))
    assert second.version == 2 and book.latest(metric="bbh_match", identity=identity) == second
    before = sim.stats()["requests"]
    assert [o.kind for o in run.run_batch(first, owner="m2")] == ["duplicate"] * 3
    assert sim.stats()["requests"] == before
    run.run_batch([new_job("bbh_match", parse_sample({"id": "new", "input": "Is 2 even?",
                                                       "output": "True", "reference": "True"}))],
                  owner="m3")
    (new,) = [r for r in verdicts(store) if r.key.sample_id == "new"]
    assert new.cascade is not None and new.cascade["thresholds_version"] == 2


def test_the_review_slice_s_samples_are_judged_by_every_tier(
        store: SqlStore, judge: JudgeFleet, metrics_dir: Path) -> None:
    identity = identity_of(store, judge, metrics_dir)
    ThresholdBook(store).save(metric="bbh_match", identity=identity,
                              thresholds=[0.0, None], report={}, now=datetime.now(UTC))
    evaluator(store, judge, metrics_dir, review_rate=1.0).run_batch(jobs(5), owner="m1")
    for record in verdicts(store):
        assert record.cascade is not None and record.cascade["shadow"]
        tried = record.cascade["tried"]
        assert [t["model"] for t in tried] == ["small", "large"]
        assert all(t["scores"] is not None for t in tried)
        # The cheap tier settles (threshold 0): its verdict is kept, the large one is data.
        assert record.cascade["tier"] == 1 and record.scores == tried[0]["scores"]


def test_a_job_naming_its_model_and_a_settings_override_skip_the_cascade(
        store: SqlStore, judge: JudgeFleet, metrics_dir: Path) -> None:
    metric = load_registry(metrics_dir).get("bbh_match")
    (one,) = jobs(1)
    named = replace(one, judge_model="judge-sim")
    run = evaluator(store, judge, metrics_dir)
    assert run.verdict_key(named, metric).judge_model == "judge-sim"
    run.run_batch([named], owner="m1")
    (record,) = verdicts(store)
    assert record.cascade is None and record.key.judge_model == "judge-sim"


@pytest.mark.parametrize(("cascade", "problem"), [
    ("  cascade:\n    - {model: small}\n", "at least two tiers"),
    ("  cascade:\n    - {model: a}\n    - {model: a}\n", "names a model twice"),
    ("  model: x\n  cascade:\n    - {model: a}\n    - {model: b}\n", "not both"),
    ("  mode: batch\n  cascade:\n    - {model: a}\n    - {model: b}\n", "mode 'call' only"),
    ("  cascade:\n    - {model: a, mode: batch, samples: 3}\n    - {model: b}\n",
     "a batch tier's confidence is read from log-probabilities"),
    ("  cascade:\n    - {model: a, mode: batch, endpoint: local}\n    - {model: b}\n",
     "a batch tier goes through the fleet's Batch API"),
    ("  cascade:\n    - {check: {check: json_valid}, on_fail: 0, mode: batch}\n"
     "    - {model: b}\n", "a check tier runs in the worker: it has no 'mode: batch'"),
    ("  cascade:\n    - {model: a, mode: later}\n    - {model: b}\n", "mode"),
    ("  cascade:\n    - {model: a, top_logprobs: 50}\n    - {model: b}\n", "top_logprobs"),
    ("  cascade:\n    - {model: a, samples: 0}\n    - {model: b}\n", "samples"),
])
def test_a_bad_cascade_is_refused_naming_the_problem(tmp_path: Path, cascade: str,
                                                     problem: str) -> None:
    folder = cascade_metrics(tmp_path / "bad", cascade)
    with pytest.raises(InvalidMetricSpec, match=problem):
        load_registry(folder)


def verdict_json(sample_id: str, *, correct: bool, reasoning: int) -> str:
    return json.dumps({"id": sample_id, "is_correct": correct, "extracted_answer": "x",
                       "reasoning_score": reasoning, "error_type": "none", "comment": None})


def test_a_sampled_tier_takes_the_agreement_of_its_k_samples_as_confidence(
        store: SqlStore, judge: JudgeFleet, tmp_path: Path, sim: RunningSim) -> None:
    """For a server without log-probabilities: five samples; all five agreeing settle at
    the cheap tier, three of five (0.6, under the threshold) go on; all five are paid."""
    folder = cascade_metrics(tmp_path / "sampled", "  cascade:\n"
                             "    - {model: small, samples: 5, sample_temperature: 0.8}\n"
                             "    - {model: large}\n")
    metric = load_registry(folder).get("bbh_match")
    ThresholdBook(store).save(metric="bbh_match", identity=metric_cascade_identity(metric),
                              thresholds=[0.8, None], report={}, now=datetime.now(UTC))
    agree, split = (verdict_json("cas-0", correct=True, reasoning=4),
                    verdict_json("cas-1", correct=True, reasoning=4))
    other = verdict_json("cas-1", correct=False, reasoning=2)
    sim.script([{"match": "Is 0 even", "replies": [{"content": agree}] * 5},
                {"match": "Is 1 even", "then": "default",
                 "replies": [{"content": split}] * 3 + [{"content": other}] * 2}])
    evaluator(store, judge, folder).run_batch(jobs(2), owner="m1")
    sure, unsure = verdicts(store)
    assert sure.cascade is not None and unsure.cascade is not None
    assert (sure.cascade["tier"], sure.cascade["confidence"]) == (1, 1.0)
    assert sure.attempts == 5 and sure.cascade["tried"][0]["samples"] == 5
    assert sure.cost_usd == pytest.approx(sure.cascade["tried"][0]["cost_usd"])
    small, large = unsure.cascade["tried"]
    assert small["confidence"] == pytest.approx(0.6) and small["scores"]["correct"] == 1.0
    assert unsure.cascade["tier"] == 2 and unsure.attempts == 6
    assert unsure.cost_usd == pytest.approx(small["cost_usd"] + large["cost_usd"])


def test_uncertainty_sampling_queues_the_unsure_verdicts_in_their_own_stratum(
        database_url: str, judge: JudgeFleet, metrics_dir: Path) -> None:
    review = ReviewSlice({"bbh_match": MetricSlice(rate=0.0, confidence_strata=(
        Stratum(below=0.95, rate=1.0),))})
    store = open_store(database_url, review=review)
    try:
        metric = load_registry(metrics_dir).get("bbh_match")
        ThresholdBook(store).save(metric="bbh_match", identity=metric_cascade_identity(metric),
                                  thresholds=[0.0, None], report={}, now=datetime.now(UTC))
        run = evaluator(store, judge, metrics_dir)
        run.options = replace(run.options, review=review)
        run.run_batch(jobs(30), owner="m1")
        unsure = {r.key.sample_id for r in store.iter_verdicts()
                  if r.cascade and r.cascade["confidence"] is not None
                  and r.cascade["confidence"] < 0.95}
        items = list(ReviewQueue(store).iter_items(metric="bbh_match"))
        assert unsure and len(unsure) < 30
        assert {item.sample_id for item in items} == unsure
        assert {(item.stratum, item.probability) for item in items} == {
            ("confidence below 0.95", 1.0)}
    finally:
        store.close()
