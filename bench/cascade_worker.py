"""A judge cascade through the worker's own path: shadow calls, labels, fit, then traffic.

Unlike ``bench/judge_cascade.py`` (the reply code called directly, every metric), this
runs the real path for ``bbh_match``: the evaluator judging over HTTP against the judge
simulator, the embedded SQLite store with the review slice, people's labels in the
review queue, the fit of ``evalfleet judge cascade fit`` stored as a version, and the
worker reading it. Steps:

1. ``--labels`` samples judged with the whole slice shadowed (every tier asked), each
   labelled as the simulated people would (the simulator's verdict with no error);
2. thresholds fitted on those labels (target ``--target``, delta ``--delta`` per tier)
   and stored;
3. ``--traffic`` new samples judged by the cascade, with a ``--review-rate`` slice
   shadowed, and the same samples judged by the large judge alone (another metric file:
   its own keys), to compare costs.

Two tiers: ``nano-judge`` wrong on ``--small-error`` of prompts with honest
log-probabilities, then ``large-judge`` wrong on ``--large-error``. Prices per million
tokens as gpt-4.1-nano (0.10 input, 0.40 output) and gpt-4.1 (2.00, 8.00), tokens as the
simulator counts them. Prints the figures and the setup.

    python -m bench.cascade_worker --labels 300 --traffic 1000
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from evalfleet.calibration.cascade import Guarantee, TierJudgement, item_agrees
from evalfleet.calibration.cascade_labels import queue_items
from evalfleet.calibration.cascade_status import cascade_status
from evalfleet.core.cascade import metric_cascade_identity, score_kinds
from evalfleet.core.message import Job, new_job
from evalfleet.core.metric import Metric, load_registry
from evalfleet.core.review_slice import MetricSlice, ReviewSlice
from evalfleet.core.sample import parse_sample
from evalfleet.core.settings import Settings
from evalfleet.judgesim import simulated_verdict
from evalfleet.judgesim.config import SimConfig
from evalfleet.judgesim.runner import start_in_thread
from evalfleet.store import SqliteStore, VerdictRecord, migrate
from evalfleet.store.queries.cascade import ThresholdBook
from evalfleet.store.queries.review_queue import LabelValue, ReviewQueue
from testkit.metrics import cascade_metrics
from workers.cascade import ThresholdCache
from workers.evaluation import Evaluator, EvaluatorOptions
from workers.judge import AsyncHttpJudge, JudgeFleet
from workers.renderer import render_messages
from workers.verdicts import Verdict, parse_verdict

PRICES = {"nano-judge": [0.10, 0.40], "large-judge": [2.00, 8.00]}
BATCH = 50


def metric_files(folder: Path) -> tuple[Path, Path]:
    """bbh_match with the cascade, and bbh_match judged by the large judge alone."""
    return (cascade_metrics(folder / "cascade", "  cascade:\n    - {model: nano-judge}\n"
                                                "    - {model: large-judge}\n"),
            cascade_metrics(folder / "alone", "  model: large-judge\n"))


def jobs(start: int, count: int) -> list[Job]:
    return [new_job("bbh_match", parse_sample({
        "id": f"b-{index}", "input": f"Question {index}: is {index} a multiple of 3?",
        "output": f"Working it out... {'True' if index % 3 == 0 else 'False'}",
        "reference": "True" if index % 3 else "False"})) for index in range(start, start + count)]


def truth(metric: Metric, job: Job) -> dict[str, object]:
    """People's verdict: the simulator's with no error."""
    return simulated_verdict(render_messages(metric, job.sample),
                             response_format={"type": "json_object"})


def judge_all(evaluator: Evaluator, batch: list[Job]) -> None:
    for start in range(0, len(batch), BATCH):
        evaluator.run_batch(batch[start:start + BATCH], owner=f"bench-{start}")


def label_queue(store: SqliteStore, metric: Metric, by_id: dict[str, Job]) -> int:
    queue = ReviewQueue(store)
    labelled = 0
    for item in list(queue.iter_items(metric="bbh_match")):  # read before writing (SQLite)
        people = truth(metric, by_id[item.sample_id])
        reasoning = int(people["reasoning_score"])  # type: ignore[call-overload]
        queue.label(item_id=item.id, reviewer="bench", labels={
            "correct": LabelValue(people["is_correct"], float(bool(people["is_correct"]))),
            "reasoning": LabelValue(reasoning, (reasoning - 1) / 4)},
            comment=None, source="import", now=datetime.now(UTC), require_lease=False)
        labelled += 1
    return labelled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--labels", type=int, default=300)
    parser.add_argument("--traffic", type=int, default=1000)
    parser.add_argument("--small-error", type=float, default=0.2)
    parser.add_argument("--large-error", type=float, default=0.05)
    parser.add_argument("--target", type=float, default=0.85)
    parser.add_argument("--delta", type=float, default=0.05)
    parser.add_argument("--review-rate", type=float, default=0.01)
    args = parser.parse_args()
    started = time.perf_counter()
    sim = start_in_thread(SimConfig.build({"latency_ms": 1}))
    sim.configure(judge_profiles={"nano-judge": {"error_rate": args.small_error},
                                  "large-judge": {"error_rate": args.large_error}})
    folder = Path(tempfile.mkdtemp(prefix="cascade-bench-"))
    cascade_dir, alone_dir = metric_files(folder)
    metric = load_registry(cascade_dir).get("bbh_match")
    fleet = JudgeFleet(AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=30,
                                      max_connections=32), concurrency=32)
    options = EvaluatorOptions.from_settings(Settings(model_prices=PRICES))

    def evaluator(store: SqliteStore, metrics: Path, review_rate: float) -> Evaluator:
        review = ReviewSlice({"bbh_match": MetricSlice(rate=review_rate)})
        return Evaluator(registry=load_registry(metrics), store=store, judge=fleet,
                         options=replace(options, review=review),
                         thresholds=ThresholdCache(ThresholdBook(store).latest, ttl_s=0.0))

    def store_for(name: str, review_rate: float) -> SqliteStore:
        store = SqliteStore(f"sqlite:///{folder / name}.db",
                            review=ReviewSlice({"bbh_match": MetricSlice(rate=review_rate)}))
        migrate(store.engine)
        return store

    store = store_for("cascade", 1.0)
    labelled_jobs = jobs(0, args.labels)
    judge_all(evaluator(store, cascade_dir, 1.0), labelled_jobs)
    label_queue(store, metric, {job.sample.id: job for job in labelled_jobs})
    identity = metric_cascade_identity(metric)
    guarantee = Guarantee(target=args.target, delta=args.delta)
    found = queue_items(ThresholdBook(store).labelled_items(metric="bbh_match",
                                                            identity=identity), metric=metric)
    report = cascade_status(found.items, kinds=score_kinds(metric), guarantee=guarantee)
    ThresholdBook(store).save(metric="bbh_match", identity=identity,
                              thresholds=report.fit.thresholds, report={},
                              now=datetime.now(UTC))
    store.close()

    traffic = jobs(1_000_000, args.traffic)
    store = store_for("cascade", args.review_rate)
    judge_all(evaluator(store, cascade_dir, args.review_rate), traffic)
    ids = {job.sample.id for job in traffic}
    records = [r for r in store.iter_verdicts() if r.key.sample_id in ids]
    store.close()
    alone_store = store_for("alone", 0.0)
    judge_all(evaluator(alone_store, alone_dir, 0.0), traffic)
    alone = list(alone_store.iter_verdicts())
    alone_store.close()
    fleet.close()
    sim.stop()
    print(json.dumps(summary(records, alone, metric=metric, traffic=traffic,
                             guarantee=guarantee, thresholds=report.fit.thresholds), indent=2))
    print(f"setup: {args.labels} labelled items (every tier), {args.traffic} production "
          f"samples, review slice {args.review_rate:.0%} shadowed, small judge wrong on "
          f"{args.small_error:.0%} (honest log-probabilities), large on "
          f"{args.large_error:.0%}; target {args.target:.0%}, delta {args.delta} per tier; "
          f"{platform.python_version()} on {platform.machine()}, "
          f"{time.perf_counter() - started:.0f} s")


def summary(records: list[VerdictRecord], alone: list[VerdictRecord], *, metric: Metric,
            traffic: list[Job], guarantee: Guarantee,
            thresholds: tuple[float | None, ...]) -> dict[str, object]:
    kinds = score_kinds(metric)
    by_id = {job.sample.id: job for job in traffic}
    settled = [r for r in records if r.cascade and r.cascade["tier"] == 1]
    accepted = [r for r in records if r.cascade and not r.cascade["low_confidence"]]

    def agrees(record: VerdictRecord) -> bool:
        people = parse_verdict(json.dumps(truth(metric, by_id[record.key.sample_id])),
                               metric=metric, sample=by_id[record.key.sample_id].sample)
        assert isinstance(people, Verdict)
        return bool(item_agrees(TierJudgement(record.scores, None), people.scores,
                                kinds=kinds, tolerance=guarantee.tolerance))

    cascade_usd = sum(r.cost_usd or 0.0 for r in records)
    alone_usd = sum(r.cost_usd or 0.0 for r in alone)
    return {
        "thresholds": thresholds, "verdicts": len(records),
        "settled_small": len(settled) / len(records),
        "agreement_accepted": sum(map(agrees, accepted)) / max(len(accepted), 1),
        "agreement_settled_small": sum(map(agrees, settled)) / max(len(settled), 1),
        "low_confidence": 1 - len(accepted) / len(records),
        "usd_per_1000_cascade": 1000 * cascade_usd / len(records),
        "usd_per_1000_large_alone": 1000 * alone_usd / max(len(alone), 1),
    }


if __name__ == "__main__":
    main()
