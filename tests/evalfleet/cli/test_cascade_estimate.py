"""``evalfleet review estimate`` on a cascade metric across refits, on the store the tests
run on: without folds the label pool starts at the last refit; cross-fitted, every label
counts again, re-scored with the thresholds in use."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from evalfleet.cli import main
from evalfleet.core.message import Job, new_job
from evalfleet.core.metric import load_registry
from evalfleet.core.review_slice import MetricSlice, ReviewSlice
from evalfleet.core.sample import parse_sample
from evalfleet.judgesim import RunningSim
from evalfleet.store import open_store
from evalfleet.store.queries.cascade import ThresholdBook
from evalfleet.store.queries.review_queue import ReviewQueue
from tests.helpers import cascade_metrics, evaluator_options, label_like_people
from workers.cascade import ThresholdCache
from workers.evaluation import Evaluator
from workers.judge import AsyncHttpJudge, JudgeFleet

ESTIMATE = ["review", "estimate", "--metric", "bbh_match", "--score", "correct",
            "--min-labels", "20", "--min-stratum-labels", "10"]


def judged(run: Evaluator, prefix: str, count: int) -> list[Job]:
    jobs = [new_job("bbh_match", parse_sample({
        "id": f"{prefix}-{i}", "input": f"Is {i} odd?", "output": f"So... {i % 2 == 1}",
        "reference": str(i % 2 == 1)})) for i in range(count)]
    for start in range(0, count, 40):
        run.run_batch(jobs[start:start + 40], owner=f"{prefix}{start}")
    return jobs


def estimate(env: dict[str, str], *extra: str) -> dict[str, Any]:
    result = CliRunner(env=env).invoke(main, [*ESTIMATE, "--json", *extra],
                                       catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (found,) = json.loads(result.stdout)
    return found  # type: ignore[no-any-return]


def test_estimates_follow_the_refits_of_a_cascade(tmp_path: Path, database_url: str,
                                                  sim: RunningSim) -> None:
    metrics_dir = cascade_metrics(tmp_path / "metrics")
    sim.configure(judge_profiles={"small": {"error_rate": 0.1}, "large": {"error_rate": 0.02}})
    review = ReviewSlice({"bbh_match": MetricSlice(rate=1.0)})
    store = open_store(database_url, review=review)
    fleet = JudgeFleet(AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=5,
                                      max_connections=8), concurrency=8)
    env = {"EVALFLEET_DATABASE_URL": database_url, "EVALFLEET_METRICS_DIR": str(metrics_dir)}
    try:
        run = Evaluator(registry=load_registry(metrics_dir), store=store, judge=fleet,
                        options=replace(evaluator_options(judge_model="judge-sim"),
                                        review=review),
                        thresholds=ThresholdCache(ThresholdBook(store).latest, ttl_s=0.0))
        queue = ReviewQueue(store)
        metric = run.registry.get("bbh_match")
        first = label_like_people(queue, judged(run, "r", 120), metric)
        before = estimate(env)
        assert before["cascade_labels"] is None and before["labels"] == first == 120

        fit = CliRunner(env=env).invoke(main, ["judge", "cascade", "fit", "--metric",
                                               "bbh_match"], catch_exceptions=False)
        assert fit.exit_code == 0, fit.output
        (stored,) = ThresholdBook(store).history(metric="bbh_match")
        after = label_like_people(queue, judged(run, "p", 40), metric)
        since = stored.created_at.isoformat()
        refit = estimate(env, "--since", since)
        # Not cross-fitted: the labels from before the refit measured another cascade.
        assert "not cross-fitted" in refit["cascade_labels"]
        assert datetime.fromisoformat(refit["label_start"]) == stored.created_at
        assert (refit["verdicts"], refit["labels"], refit["status"]) == (40, after, "ok")

        crossed = CliRunner(env=env).invoke(main, ["judge", "cascade", "fit", "--metric",
                                                   "bbh_match", "--folds", "2"],
                                            catch_exceptions=False)
        assert crossed.exit_code == 0, crossed.output
        second = ThresholdBook(store).history(metric="bbh_match")[-1]
        assert len(second.folds) == 2
        last = label_like_people(queue, judged(run, "q", 40), metric)
        rescored = estimate(env, "--since", second.created_at.isoformat())
        # Cross-fitted: every label since the label window's start counts, re-scored.
        assert "cross-fitted over 2 folds" in rescored["cascade_labels"]
        assert "left out" not in rescored["cascade_labels"]
        assert datetime.fromisoformat(rescored["label_start"]) < stored.created_at
        assert (rescored["verdicts"], rescored["labels"]) == (40, first + after + last)
        assert rescored["status"] == "ok"

        table = CliRunner(env=env).invoke(main, [*ESTIMATE, "--since", since],
                                          catch_exceptions=False)
        assert "labels of a cascade: cascade thresholds version 2" in table.stdout
        assert "the window starts before that refit" in table.stdout
    finally:
        fleet.close()
        store.close()
