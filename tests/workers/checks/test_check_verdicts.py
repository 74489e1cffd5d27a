"""Check metrics through the evaluator against a real store: verdicts keyed by check,
stored together, idempotent, and no judge call."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from evalfleet.core.message import Job, new_job
from evalfleet.core.metric import load_registry
from evalfleet.core.review_slice import MetricSlice, ReviewSlice
from evalfleet.core.sample import parse_sample
from evalfleet.judgesim import RunningSim
from evalfleet.review.estimate import CHECK_SCORE, estimate_score
from evalfleet.store import SqlStore, VerdictRecord, VerdictStore, open_store
from evalfleet.store.queries.estimate import EstimateReads
from evalfleet.store.queries.review_queue import ReviewQueue
from tests.helpers import evaluator_options
from tests.workers.checks.builders import contract_metrics
from workers.evaluation import Evaluator
from workers.judge import AsyncHttpJudge, JudgeClient, JudgeFleet

CHECKS = ["valid_json", "answer_schema", "no_api_key", "no_internal_url", "short_enough"]


@pytest.fixture
def metrics_dir(tmp_path: Path) -> Path:
    return contract_metrics(tmp_path)


@pytest.fixture
def judge(sim: RunningSim) -> Iterator[JudgeClient]:
    client = JudgeFleet(AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=5,
                                       max_connections=4), concurrency=4)
    yield client
    client.close()


def evaluator(store: VerdictStore, judge: JudgeClient, metrics_dir: Path) -> Evaluator:
    return Evaluator(registry=load_registry(metrics_dir), store=store, judge=judge,
                     options=evaluator_options(judge_model="judge-sim", keep_samples=True))


def contract_job(n: int, output: str) -> Job:
    return new_job("output_contract", parse_sample(
        {"id": f"req-{n}", "output": output, "attributes": {"app": "bot"}}))


GOOD = '{"answer": "Within 14 days.", "sources": ["policy.md"]}'
LEAKY = '{"answer": "use sk-abcdefghijklmnopqrstuvwxyz0123 at https://kb.internal/x"}'


def stored(store: SqlStore) -> dict[tuple[str, str], VerdictRecord]:
    return {(r.key.sample_id, r.key.judge_model): r for r in store.iter_verdicts()}


def test_each_check_of_each_job_is_a_verdict_and_the_judge_is_never_called(
    any_store: SqlStore, judge: JudgeClient, metrics_dir: Path, sim: RunningSim,
) -> None:
    run = evaluator(any_store, judge, metrics_dir)
    metric = run.registry.get("output_contract")
    outcomes = run.run_batch([contract_job(1, GOOD), contract_job(2, LEAKY)], owner="m1")
    assert [outcome.kind for outcome in outcomes] == ["stored", "stored"]
    verdicts = stored(any_store)
    assert len(verdicts) == 10
    for check in metric.checks:
        good = verdicts[("req-1", f"check:{check.name}")]
        assert good.key.prompt_version == check.version and good.key.metric == "output_contract"
        assert good.status == "ok" and good.scores == {check.name: 1.0}, good
        assert good.raw_scores == {check.name: True} and good.reason
        assert good.cost_usd == 0.0 and good.judge_mode == "check"
        assert good.prompt_tokens is None and good.attributes == {"app": "bot"}
    leaky = {name: verdicts[("req-2", f"check:{name}")].scores[name] for name in CHECKS}
    assert leaky == {"valid_json": 1.0, "answer_schema": 0.0, "no_api_key": 0.0,
                     "no_internal_url": 0.0, "short_enough": 1.0}
    assert "'sources' is a required property" in (
        verdicts[("req-2", "check:answer_schema")].reason or "")
    assert sim.stats()["requests"] == 0


def test_a_redelivery_stores_nothing_and_a_changed_check_alone_runs_again(
    any_store: SqlStore, judge: JudgeClient, metrics_dir: Path,
) -> None:
    jobs = [contract_job(1, GOOD), contract_job(2, LEAKY), contract_job(1, GOOD)]
    outcomes = evaluator(any_store, judge, metrics_dir).run_batch(jobs, owner="m1")
    assert [outcome.kind for outcome in outcomes] == ["stored", "stored", "duplicate"]
    again = evaluator(any_store, judge, metrics_dir).run_batch(jobs, owner="m2")
    assert [outcome.kind for outcome in again] == ["duplicate"] * 3
    assert any_store.counts().verdicts == 10
    path = metrics_dir / "output_contract.yaml"
    data = yaml.safe_load(path.read_text())
    data["checks"]["short_enough"]["max"] = 5
    path.write_text(yaml.safe_dump(data))
    changed = evaluator(any_store, judge, metrics_dir).run_batch(jobs[:2], owner="m3")
    assert [outcome.kind for outcome in changed] == ["stored", "stored"]
    assert any_store.counts().verdicts == 12
    newest = [r for r in any_store.iter_verdicts() if r.key.judge_model == "check:short_enough"]
    assert sorted(r.scores["short_enough"] for r in newest) == [0.0, 0.0, 1.0, 1.0]


def test_a_verdict_the_database_refuses_is_a_dead_letter_and_the_others_are_stored(
    any_store: SqlStore, judge: JudgeClient, metrics_dir: Path,
) -> None:
    # One transaction claims and stores a message's checks; a refused verdict rolls it
    # back, and the two-step way stores the rest and keeps the refused job.
    nul_id = new_job("output_contract", parse_sample({"id": "bad\x00id", "output": GOOD}))
    outcomes = evaluator(any_store, judge, metrics_dir).run_batch(
        [contract_job(1, GOOD), nul_id], owner="m1")
    assert [(outcome.kind, outcome.detail) for outcome in outcomes] == [
        ("stored", "ok"), ("dead_letter", "unstorable")]
    assert {key[0] for key in stored(any_store)} == {"req-1"}
    assert any_store.counts().verdicts == 5
    letters = list(any_store.iter_dead_letters())  # one per check's key
    assert len(letters) == len(CHECKS)
    assert all(letter.sample_id == "bad\\u0000id" and "sample_id" in letter.error
               for letter in letters)
    with any_store.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM claims").scalar_one() == 0


def test_a_job_missing_the_checked_value_gets_named_failed_verdicts(
    any_store: SqlStore, judge: JudgeClient, metrics_dir: Path,
) -> None:
    path = metrics_dir / "output_contract.yaml"
    data = yaml.safe_load(path.read_text())
    data["checks"] = {"title_json": {"check": "json_valid", "field": "fields.title"},
                      "same": {"check": "equals"}}
    path.write_text(yaml.safe_dump(data))
    evaluator(any_store, judge, metrics_dir).run_batch([contract_job(1, GOOD)], owner="m1")
    verdicts = stored(any_store)
    for name, field in (("title_json", "fields.title"), ("same", "reference")):
        verdict = verdicts[("req-1", f"check:{name}")]
        assert (verdict.status, verdict.error_class) == ("failed", "missing_input")
        assert verdict.error == f"the sample has no {field}"
        assert verdict.scores == {name: None} and verdict.raw_scores == {}


def test_check_verdicts_stay_out_of_the_review_slice_and_are_not_corrected(
    any_store: SqlStore, judge: JudgeClient, metrics_dir: Path,
) -> None:
    url = any_store.engine.url.render_as_string(hide_password=False)
    reviewed = open_store(url, pool_size=1,
                          review=ReviewSlice({"output_contract": MetricSlice(rate=1.0)}))
    try:
        run = evaluator(reviewed, judge, metrics_dir)
        run.run_batch([contract_job(n, LEAKY if n % 2 else GOOD) for n in range(10)],
                      owner="m1")
    finally:
        reviewed.close()
    assert any_store.counts().verdicts == 50
    assert list(ReviewQueue(any_store).iter_items(metric="output_contract")) == []
    now = datetime.now(UTC)
    found = estimate_score(EstimateReads(any_store), metric=run.registry.get("output_contract"),
                           score="no_api_key", segment={}, start=now - timedelta(hours=1),
                           end=now + timedelta(hours=1), label_start=now - timedelta(days=1))
    assert found.status == CHECK_SCORE and found.corrected is None
    assert found.raw is not None and found.raw.value == 0.5 and found.verdicts == 10
