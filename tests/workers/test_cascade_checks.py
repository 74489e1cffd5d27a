"""A cascade that starts with a deterministic check: a decisive result settles the sample
outright at no cost, anything else goes on to the judges. Through a real worker against
Postgres and the simulator, through the evaluator for the review slice's samples (judged
by every tier all the same), and the metric files a check tier refuses."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from evalfleet.core.cascade import metric_cascade_identity
from evalfleet.core.errors import InvalidMetricSpec
from evalfleet.core.message import new_job
from evalfleet.core.metric import load_registry
from evalfleet.core.review_slice import MetricSlice, ReviewSlice
from evalfleet.core.sample import parse_sample
from evalfleet.core.settings import Settings
from evalfleet.judgesim import RunningSim
from evalfleet.store import SqlStore
from evalfleet.store.queries.cascade import ThresholdBook
from tests.helpers import WorkerProcess, cascade_metrics, evaluator_options, wait_until
from tests.test_fleet import cli, export, write_jsonl
from workers.cascade import ThresholdCache
from workers.evaluation import Evaluator
from workers.judge import AsyncHttpJudge, JudgeFleet

#: An answer that names neither True nor False is wrong, whatever a judge would say.
TIERS = ("  cascade:\n"
         "    - {check: {check: matches, pattern: '(?i)\\b(true|false)\\b'}, name: answered,"
         " on_fail: 0}\n"
         "    - {model: small, top_logprobs: 5}\n"
         "    - {model: large}\n")

PRICES = {"small": [0.1, 0.4], "large": [2.0, 8.0]}


def samples(count: int) -> list[dict[str, str]]:
    """Even samples answer, odd ones do not."""
    return [{"id": f"chk-{n}", "input": f"Is {n} even?",
             "output": "True" if n % 2 == 0 else "I cannot tell.", "reference": "True"}
            for n in range(count)]


def test_a_failed_check_settles_at_no_cost_and_the_rest_go_to_the_judges(
    settings: Settings, sim: RunningSim, store: SqlStore,
    start_worker: Callable[..., WorkerProcess], tmp_path: Path,
) -> None:
    metrics_dir = cascade_metrics(tmp_path / "metrics", TIERS)
    settings = settings.model_copy(update={"metrics_dir": metrics_dir,
                                           "model_prices": {}})
    sim.configure(judge_profiles={"small": {"error_rate": 0.1}, "large": {"error_rate": 0.02}})
    assert cli(settings, "produce", str(write_jsonl(tmp_path / "s.jsonl", samples(20))),
               "--metric", "bbh_match").exit_code == 0
    start_worker(settings, queues=["bbh_match"], concurrency=4)
    wait_until(lambda: store.counts().verdicts == 20, timeout_s=120, what="20 verdicts")

    rows = {row["sample_id"]: row for row in export(settings, "--metric", "bbh_match")}
    checked = [rows[f"chk-{n}"] for n in range(1, 20, 2)]
    judged = [rows[f"chk-{n}"] for n in range(0, 20, 2)]
    for row in checked:
        assert row["status"] == "ok" and row["settled_model"] == "check:answered"
        assert row["scores"] == {"correct": 0.0, "reasoning": 0.0}
        assert row["cost_usd"] == 0.0 and row["prompt_tokens"] is None
        (tried,) = row["cascade"]["tried"]
        assert tried["model"] == "check:answered" and tried["cost_usd"] == 0.0
        assert tried["check"]["passed"] is False and tried["samples"] == 0
        assert row["cascade"]["confidence"] == 1.0 and not row["cascade"]["low_confidence"]
    # The others passed the check, which settles nothing on a pass: on to the judges
    # (before any fit, only the last tier is asked).
    for row in judged:
        assert row["settled_model"] == "large"
        first, last = row["cascade"]["tried"]
        assert (first["model"], first["scores"], first["check"]["passed"]) == (
            "check:answered", None, True)
        assert last["model"] == "large"
    assert sim.stats()["requests"] == len(judged)
    # The check tier is part of the cascade's identity, as a model would be.
    metric = load_registry(metrics_dir).get("bbh_match")
    assert {row["judge_model"] for row in rows.values()} == {metric_cascade_identity(metric)}
    assert metric_cascade_identity(metric) != metric_cascade_identity(
        load_registry(cascade_metrics(tmp_path / "plain")).get("bbh_match"))


def test_the_review_slice_s_samples_are_judged_by_every_tier_after_a_check_settles(
        store: SqlStore, sim: RunningSim, tmp_path: Path) -> None:
    metrics_dir = cascade_metrics(tmp_path / "metrics", TIERS)
    registry = load_registry(metrics_dir)
    sim.configure(judge_profiles={"small": {"error_rate": 0.1}, "large": {"error_rate": 0.02}})
    fleet = JudgeFleet(AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=5,
                                      max_connections=4), concurrency=4)
    try:
        options = replace(evaluator_options(judge_model="judge-sim", model_prices=PRICES),
                          review=ReviewSlice({"bbh_match": MetricSlice(rate=1.0)}))
        evaluator = Evaluator(registry=registry, store=store, judge=fleet, options=options,
                              thresholds=ThresholdCache(ThresholdBook(store).latest, ttl_s=0))
        jobs = [new_job("bbh_match", parse_sample(sample)) for sample in samples(2)]
        assert [o.kind for o in evaluator.run_batch(jobs, owner="m1")] == ["stored"] * 2
    finally:
        fleet.close()
    records = {record.key.sample_id: record for record in store.iter_verdicts()}
    shadowed = records["chk-1"].cascade
    assert shadowed is not None and shadowed["shadow"]
    # Kept: the check's verdict; the judges' answers are the fit's data, and paid for.
    assert shadowed["tier"] == 1 and records["chk-1"].scores == {"correct": 0.0,
                                                                  "reasoning": 0.0}
    assert [t["model"] for t in shadowed["tried"]] == ["check:answered", "small", "large"]
    assert all(t["scores"] is not None for t in shadowed["tried"])
    assert records["chk-1"].cost_usd == pytest.approx(
        sum(t["cost_usd"] for t in shadowed["tried"])) and records["chk-1"].cost_usd > 0


@pytest.mark.parametrize(("tiers", "problem"), [
    ("    - {model: small}\n    - {check: {check: json_valid}, on_fail: 0}\n",
     "check tiers come first"),
    ("    - {check: {check: json_valid}}\n    - {model: large}\n", "settles something"),
    ("    - {check: {check: json_valid}, on_fail: {correct: 0}}\n    - {model: large}\n",
     "settles every score"),
    ("    - {check: {check: json_valid}, on_fail: 2}\n    - {model: large}\n",
     "not a normalised score"),
    ("    - {check: {check: json_valid}, model: x, on_fail: 0}\n    - {model: large}\n",
     "exactly one of 'model' and 'check'"),
    ("    - {check: {check: team, function: 'a:b'}, on_fail: 0}\n    - {model: large}\n",
     "built-in check"),
    ("    - {check: {check: json_valid}, on_fail: 0, endpoint: local}\n"
     "    - {model: large}\n", "no 'endpoint'"),
    ("    - {model: small, on_fail: 0}\n    - {model: large}\n", "belong to a check tier"),
])
def test_a_bad_check_tier_is_refused_naming_the_problem(tmp_path: Path, tiers: str,
                                                        problem: str) -> None:
    folder = cascade_metrics(tmp_path / "bad", "  cascade:\n" + tiers)
    with pytest.raises(InvalidMetricSpec, match=problem):
        load_registry(folder)
