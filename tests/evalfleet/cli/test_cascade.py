"""``evalfleet judge cascade status`` on a file of labelled items, and ``fit`` on the
review queue's labels."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from click.testing import CliRunner

from evalfleet.cli import main
from evalfleet.core.message import new_job
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


def write_items(path: Path) -> Path:
    sure = {"labels": {"correct": 1.0, "reasoning": 0.75}, "tiers": [
        {"model": "nano", "scores": {"correct": 1.0, "reasoning": 0.75}, "confidence": 0.98,
         "cost_usd": 0.0001},
        {"model": "large", "scores": {"correct": 1.0, "reasoning": 0.75}, "confidence": 0.99,
         "cost_usd": 0.003}]}
    unsure = {"labels": {"correct": 0.0, "reasoning": 0.25}, "tiers": [
        {"model": "nano", "scores": {"correct": 1.0, "reasoning": 0.25}, "confidence": 0.5,
         "cost_usd": 0.0001},
        {"model": "large", "scores": {"correct": 0.0, "reasoning": 0.25}, "confidence": 0.99,
         "cost_usd": 0.003}]}
    lines = [json.dumps(sure)] * 60 + [json.dumps(unsure)] * 60 + ["not json"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_status_as_json_and_as_a_table(tmp_path: Path) -> None:
    items = write_items(tmp_path / "labels.jsonl")
    result = CliRunner().invoke(main, ["judge", "cascade", "status", str(items), "--metric",
                                       "bbh_match", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert result.stderr.startswith("skipped line 121: ")
    assert report["items"] == 120 and report["confidence_level"] == 0.9
    nano, large = report["tiers"]
    assert (nano["model"], nano["threshold"], nano["settled_share"]) == ("nano", 0.98, 0.5)
    assert nano["guaranteed_agreement"] >= 0.85
    assert (large["labels"], large["settled_share"]) == (60, 0.5)
    assert report["usd_per_1000"] < report["last_tier_usd_per_1000"]

    table = CliRunner().invoke(main, ["judge", "cascade", "status", str(items), "--metric",
                                      "bbh_match"], catch_exceptions=False)
    assert table.exit_code == 0
    assert "probability >= 90%" in table.stdout and "nano" in table.stdout
    assert "last tier alone: $3.0000" in table.stdout


def test_no_usable_items_is_a_clear_problem(tmp_path: Path) -> None:
    empty = tmp_path / "labels.jsonl"
    empty.write_text("{}\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["judge", "cascade", "status", str(empty), "--metric",
                                       "bbh_match"])
    assert result.exit_code == 2
    assert "no labelled items" in result.stderr


def test_fit_on_the_review_queue_is_refused_on_too_few_labels_then_used_by_workers(
        tmp_path: Path, database_url: str, sim: RunningSim) -> None:
    """Every random review item judged by both tiers, labelled as the simulated people
    would; ``fit`` refuses below --min-labels and stores nothing, then stores version 1,
    which a worker's next job reads; ``status`` shows it."""
    metrics_dir = cascade_metrics(tmp_path / "metrics")
    sim.configure(judge_profiles={"small": {"error_rate": 0.1}, "large": {"error_rate": 0.02}})
    store = open_store(database_url, review=ReviewSlice({"bbh_match": MetricSlice(rate=1.0)}))
    fleet = JudgeFleet(AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=5,
                                      max_connections=8), concurrency=8)
    registry = load_registry(metrics_dir)
    options = replace(evaluator_options(judge_model="judge-sim"),
                      review=ReviewSlice({"bbh_match": MetricSlice(rate=1.0)}))
    try:
        run = Evaluator(registry=registry, store=store, judge=fleet, options=options,
                        thresholds=ThresholdCache(ThresholdBook(store).latest, ttl_s=0.0))
        jobs = [new_job("bbh_match", parse_sample({
            "id": f"r-{i}", "input": f"Is {i} odd?", "output": f"So... {i % 2 == 1}",
            "reference": str(i % 2 == 1)})) for i in range(160)]
        for start in range(0, len(jobs), 40):
            run.run_batch(jobs[start:start + 40], owner=f"m{start}")
        queue = ReviewQueue(store)
        metric = registry.get("bbh_match")
        assert label_like_people(queue, jobs, metric) == 160
        env = {"EVALFLEET_DATABASE_URL": database_url,
               "EVALFLEET_METRICS_DIR": str(metrics_dir)}
        refused = CliRunner(env=env).invoke(main, ["judge", "cascade", "fit", "--metric",
                                                   "bbh_match", "--min-labels", "500"])
        assert refused.exit_code == 2 and "at least 500 needed" in refused.stderr
        identity = run.verdict_key(jobs[0], metric).judge_model
        assert ThresholdBook(store).latest(metric="bbh_match", identity=identity) is None

        fitted = CliRunner(env=env).invoke(main, ["judge", "cascade", "fit", "--metric",
                                                  "bbh_match"], catch_exceptions=False)
        assert fitted.exit_code == 0, fitted.output
        assert "160 labelled items" in fitted.stdout and "stored as version 1" in fitted.stdout
        stored = ThresholdBook(store).latest(metric="bbh_match", identity=identity)
        assert stored is not None and stored.version == 1
        small_threshold = stored.thresholds[0]
        assert small_threshold is not None  # a calibrated small judge earns a threshold
        assert stored.report["tiers"][0]["guaranteed_agreement"] >= 0.85

        shown = CliRunner(env=env).invoke(main, ["judge", "cascade", "status", "--metric",
                                                 "bbh_match"], catch_exceptions=False)
        assert "workers use version 1" in shown.stdout

        run.options = replace(options, review=None)  # production traffic, no shadows
        new = [new_job("bbh_match", parse_sample({
            "id": f"p-{i}", "input": f"Is {i} odd?", "output": f"So... {i % 2 == 1}",
            "reference": str(i % 2 == 1)})) for i in range(40)]
        run.run_batch(new, owner="p")
        records = [r for r in store.iter_verdicts() if r.key.sample_id.startswith("p-")]
        tiers = [r.cascade["tier"] for r in records if r.cascade]
        assert len(tiers) == 40 and 1 in tiers
        assert all(r.cascade and r.cascade["thresholds_version"] == 1 for r in records)

        # Cross-fitted: each fold's thresholds stored, fitted on the other fold's labels.
        crossed = CliRunner(env=env).invoke(main, ["judge", "cascade", "fit", "--metric",
                                                   "bbh_match", "--folds", "2"],
                                            catch_exceptions=False)
        assert crossed.exit_code == 0, crossed.output
        assert "stored as version 2" in crossed.stdout and "fold 1: " in crossed.stdout
        second = ThresholdBook(store).latest(metric="bbh_match", identity=identity)
        assert second is not None and len(second.folds) == 2
        assert all(len(fold) == 2 for fold in second.folds)
    finally:
        fleet.close()
        store.close()


def test_status_names_a_check_tier_instead_of_a_threshold(tmp_path: Path) -> None:
    """A check tier's threshold is fixed, not fitted: the table says it is a check."""
    metrics_dir = cascade_metrics(tmp_path / "metrics", (
        "  cascade:\n"
        "    - {check: {check: matches, pattern: '(?i)\\b(true|false)\\b'}, name: answered,"
        " on_fail: 0}\n"
        "    - {model: nano}\n    - {model: large}\n"))
    items = write_items(tmp_path / "labels.jsonl")
    lines = []
    for line in items.read_text(encoding="utf-8").splitlines()[:-1]:
        item = json.loads(line)
        sure = item["tiers"][0]["confidence"] > 0.9  # the check is decisive on those
        item["tiers"].insert(0, {"model": "check:answered", "scores": item["labels"],
                                 "confidence": 1.0 if sure else None, "cost_usd": 0.0})
        lines.append(json.dumps(item))
    items.write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = ["judge", "cascade", "status", str(items), "--metric", "bbh_match"]
    env = {"EVALFLEET_METRICS_DIR": str(metrics_dir)}
    table = CliRunner(env=env).invoke(main, args, catch_exceptions=False)
    assert table.exit_code == 0, table.output
    (check_row,) = [row for row in table.stdout.splitlines() if "check:answered" in row]
    assert "check (settles what it is decisive on)" in check_row and "1.000" not in check_row
    as_json = CliRunner(env=env).invoke(main, [*args, "--json"], catch_exceptions=False)
    tiers = json.loads(as_json.stdout)["tiers"]
    assert [tier["check"] for tier in tiers] == [True, False, False]
