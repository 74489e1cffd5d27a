"""A worker SIGKILLed between a cascade's tiers: the cheap tier answered, the next tier's
call in flight. The job comes back to another worker and is settled once, with one
verdict that went through every tier; nothing is lost and no dead letter is left."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from evalfleet.core.cascade import metric_cascade_identity
from evalfleet.core.metric import load_registry
from evalfleet.core.settings import Settings
from evalfleet.judgesim import RunningSim
from evalfleet.store import SqlStore
from evalfleet.store.queries.cascade import ThresholdBook
from tests.helpers import WorkerProcess, cascade_metrics, wait_until
from tests.test_fleet import cli, export, write_jsonl


def test_a_worker_killed_between_tiers_loses_nothing_and_settles_the_job_once(
    settings: Settings, sim: RunningSim, start_worker: Callable[..., WorkerProcess],
    store: SqlStore, tmp_path: Path,
) -> None:
    metrics_dir = cascade_metrics(tmp_path / "metrics")
    # The held call times out after judge_timeout_s: the kill comes well before; the
    # killed worker's message and claim come back within about half a minute.
    settings = settings.model_copy(update={"metrics_dir": metrics_dir, "judge_timeout_s": 15,
                                           "visibility_timeout_s": 33, "claim_lease_s": 31})
    sim.configure(judge_profiles={"small": {"error_rate": 0.1}, "large": {"error_rate": 0.02}})
    # A threshold the small judge never reaches: every job goes on to the large one.
    metric = load_registry(metrics_dir).get("bbh_match")
    ThresholdBook(store).save(metric="bbh_match", identity=metric_cascade_identity(metric),
                              thresholds=[1.0, None], report={}, now=datetime.now(UTC))
    # The first call (small) is answered at once; the second (large) is held.
    sim.script([{"match": "Is 7 odd", "then": "default",
                 "replies": [{"delay_ms": 5}, {"delay_ms": 600_000}]}])
    sample = {"id": "kill-7", "input": "Is 7 odd?", "output": "True", "reference": "True"}
    assert cli(settings, "produce", str(write_jsonl(tmp_path / "s.jsonl", [sample])),
               "--metric", "bbh_match").exit_code == 0
    worker = start_worker(settings, queues=["bbh_match"], concurrency=2)
    wait_until(lambda: sim.stats()["requests"] == 2 and sim.stats()["in_flight"] == 1,
               timeout_s=60, what="the small tier answered and the large one's call held")
    worker.kill()
    assert store.counts().verdicts == 0 and store.counts().dead_letters == 0

    start_worker(settings, queues=["bbh_match"], concurrency=2)
    wait_until(lambda: store.counts().verdicts == 1, timeout_s=120,
               what="the verdict after the restart")
    (row,) = export(settings, "--metric", "bbh_match")
    assert row["sample_id"] == "kill-7" and row["status"] == "ok"
    assert row["settled_model"] == "large"
    assert [tried["model"] for tried in row["cascade"]["tried"]] == ["small", "large"]
    assert row["cascade"]["thresholds_version"] == 1
    assert store.counts().dead_letters == 0
    # The killed worker's two calls were lost with it (an answer lives in memory until
    # its verdict is durable); the job was then judged once more, through both tiers.
    assert sim.stats()["requests"] == 4
