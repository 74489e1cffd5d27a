"""Drift canaries end to end: the simulator over HTTP, a worker, Redis, Postgres, the engine.

A calibration run sets the baseline; each cycle the canaries of one slot go through the
real queue, then the engine evaluates at the slot's end. The simulator is scripted to
change its judge partway through (shift its scores, or flip its yes/no answers).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from click.testing import CliRunner

from evalfleet.alerts import AlertEngine, CycleReport
from evalfleet.alerts.rule import load_rules
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.terminal import render_alert_view
from evalfleet.alerts.view import load_alert_view
from evalfleet.calibration.canary import CanaryFeeder
from evalfleet.cli import main
from evalfleet.core.gold import bundled_gold
from evalfleet.core.message import new_job
from evalfleet.core.sample import parse_sample
from evalfleet.core.settings import Settings
from evalfleet.judgesim import RunningSim
from evalfleet.store import SqlStore, VerdictStore
from producers.enqueuer import Enqueuer
from tests.evalfleet.alerts.receiver import Receiver
from tests.helpers import WorkerProcess, wait_until
from tests.ops.servers import stop_process

#: The canary interval and the rules' evaluation interval, in seconds.
INTERVAL_S = 300

#: Canaries per slot: four slots hold the whole 24-item gold set.
PER_SLOT = 6

#: Slots in a judge_drift rule's window.
WINDOW_SLOTS = 4

#: The judge_drift rule's ``for``.
FOR = 2

#: Steady cycles before the judge changes.
STEADY = 8

#: The first slot, aligned to the interval, a little in the past.
T0 = datetime.fromtimestamp(
    (datetime.now(UTC) - timedelta(hours=3)).timestamp() // INTERVAL_S * INTERVAL_S, tz=UTC)


def drift_rule(metric: str, score: str) -> dict[str, Any]:
    return {"name": "judge_drift", "kind": "judge_drift", "metric": metric, "score": score,
            "window": f"{WINDOW_SLOTS * INTERVAL_S}s", "interval": f"{INTERVAL_S}s",
            "min_samples": 12, "min_effect": 0.1, "mode": "baseline", "for": FOR}


def app_rule(metric: str, score: str) -> dict[str, Any]:
    return {"name": "app_drop", "metric": metric, "score": score, "mode": "threshold",
            "threshold": 0.95, "window": f"{WINDOW_SLOTS * INTERVAL_S}s",
            "interval": f"{INTERVAL_S}s", "min_samples": 10, "for": 1, "no_data": "ok"}


class Run:
    """One metric's canaries, cycle after cycle."""

    def __init__(self, settings: Settings, store: VerdictStore, engine: AlertEngine,
                 metric: str, tmp_path: Path) -> None:
        gold = tmp_path / "gold"
        gold.mkdir()
        shutil.copy(bundled_gold(metric), gold / f"{metric}.jsonl")
        self.settings = settings.model_copy(update={
            "canary_interval_s": INTERVAL_S, "canary_samples": PER_SLOT,
            "canary_gold_dir": gold})
        self.enqueuer = Enqueuer(self.settings)
        self.feeder = CanaryFeeder(self.settings, send=self.enqueuer.send_many)
        self.store, self.engine, self.metric = store, engine, metric
        self.cycle = 0

    def canaries(self) -> int:
        return sum(1 for _ in self.store.iter_verdicts(metric=self.metric,
                                                       purposes=["canary"]))

    def step(self) -> CycleReport:
        """Feed the cycle's slot, wait for its verdicts, evaluate at the slot's end."""
        start = T0 + timedelta(seconds=self.cycle * INTERVAL_S)
        self.feeder.feed(start)
        self.cycle += 1
        wait_until(lambda: self.canaries() == PER_SLOT * self.cycle, timeout_s=60,
                   what=f"canary verdicts of cycle {self.cycle}")
        return self.engine.check(at=start + timedelta(seconds=INTERVAL_S))

    def close(self) -> None:
        self.enqueuer.close()


def calibrate(settings: Settings, metric: str) -> None:
    result = CliRunner().invoke(main, ["calibrate", "--metric", metric, "--timeout", "120"],
                                env=settings.as_environment(), catch_exceptions=False)
    assert result.exit_code == 0, result.output


def drift_row(report: CycleReport) -> Any:
    return next(row for row in report.rows if row.rule == "judge_drift")


def run_until_drift(run: Run, change: Callable[[], None]) -> int:
    """Steady cycles (never firing), then the change; the cycles it took to fire."""
    for _ in range(STEADY):
        row = drift_row(run.step())
        assert row.state in ("insufficient_data", "ok"), row
        assert "firing" not in row.events
    change()
    for cycles in range(1, WINDOW_SLOTS + FOR + 1):
        if drift_row(run.step()).state == "firing":
            return cycles
    raise AssertionError(f"judge_drift did not fire within {WINDOW_SLOTS + FOR} cycles")


def test_shifted_scores_fire_judge_drift_and_app_alerts_carry_the_suspicion(
    settings: Settings, sim: RunningSim, start_worker: Callable[..., WorkerProcess],
    store: VerdictStore, open_engine: Callable[..., AlertEngine], receiver: Receiver,
    tmp_path: Path, alert_store: SqlStore,
) -> None:
    metric, score = "rag_qa", "faithfulness"
    start_worker(settings, queues=[metric])
    calibrate(settings, metric)
    engine = open_engine(drift_rule(metric, score), app_rule(metric, score))
    run = Run(settings, store, engine, metric, tmp_path)
    try:
        cycles = run_until_drift(run, lambda: sim.configure(
            score_shifts={settings.judge.judge_model: -0.5}, system_fingerprint="fp\x1b[31m-v2"))
        assert cycles <= WINDOW_SLOTS + FOR
        (drift_alert,) = [a for a in receiver.alerts()
                          if a["labels"]["alertname"] == "judge_drift"]
        annotations = drift_alert["annotations"]
        assert annotations["baseline_source"].startswith(
            f"baseline: calibration of {metric} on {metric}.jsonl")
        assert "bias_low_p_value" in annotations  # the judge scores lower than it did
        # Production traffic in the window, judged by the same (drifted) judge.
        at = T0 + timedelta(seconds=run.cycle * INTERVAL_S)
        jobs = [new_job(metric, parse_sample({
            "id": f"prod-{n}", "input": f"question {n}", "output": f"answer {n}",
            "context": [f"unrelated chunk {n}", "another"],
            "timestamp": (at - timedelta(seconds=10 + n)).isoformat(),
            "attributes": {"app": "bot"}})) for n in range(30)]
        run.enqueuer.send_many(jobs)
        wait_until(lambda: sum(1 for _ in store.iter_verdicts(
            metric=metric, purposes=["production"])) == 30, timeout_s=60,
            what="production verdicts")
        report = engine.check(at=at + timedelta(seconds=INTERVAL_S))  # the next cycle
        assert {r.rule: r.state for r in report.rows} == {"judge_drift": "firing",
                                                          "app_drop": "firing"}
    finally:
        run.close()
    (app_alert,) = [a for a in receiver.alerts() if a["labels"]["alertname"] == "app_drop"]
    suspicion = app_alert["annotations"]["judge_drift"]
    assert suspicion.startswith("judge drift suspected: judge_drift (faithfulness) "
                                "firing since ")
    assert app_alert["annotations"]["description"].startswith("judge drift suspected")
    # The page (terminal view) says it too.
    rule = next(r for r in engine.rules.rules if r.name == "app_drop")
    text = render_alert_view(load_alert_view(alert_store, rule, Segment()))
    assert "judge drift suspected: judge_drift" in text
    # What the judge reported about itself in the window, cleaned of its escapes.
    view = load_alert_view(alert_store, rule, Segment())
    fingerprints = {i["fingerprint"] for i in view.finding["judge_drift"]["identities"]}
    assert fingerprints == {"fp-v2"}


def test_flipped_binary_answers_fire_judge_drift(
    settings: Settings, sim: RunningSim, start_worker: Callable[..., WorkerProcess],
    store: VerdictStore, open_engine: Callable[..., AlertEngine], tmp_path: Path,
    alert_store: SqlStore,
) -> None:
    metric = "bbh_match"
    start_worker(settings, queues=[metric])
    calibrate(settings, metric)
    engine = open_engine(drift_rule(metric, "correct"))
    run = Run(settings, store, engine, metric, tmp_path)
    try:
        cycles = run_until_drift(run, lambda: sim.configure(
            flipped_answers=[settings.judge.judge_model]))
    finally:
        run.close()
    assert cycles <= WINDOW_SLOTS + FOR
    view = load_alert_view(alert_store, engine.rules.rules[0], Segment())
    assert view.finding["tests"][0]["test"] in ("two_proportion_z", "fisher_exact")
    text = render_alert_view(view)
    assert "judge drift: canary agreement on score correct of bbh_match" in text
    assert "baseline: calibration of bbh_match on bbh_match.jsonl" in text


def test_without_a_calibration_the_rule_reports_no_baseline_and_stays_quiet(
    settings: Settings, start_worker: Callable[..., WorkerProcess], store: VerdictStore,
    open_engine: Callable[..., AlertEngine], tmp_path: Path,
) -> None:
    metric = "rag_qa"
    start_worker(settings, queues=[metric])
    engine = open_engine(drift_rule(metric, "faithfulness"))
    run = Run(settings, store, engine, metric, tmp_path)
    try:
        rows = [drift_row(run.step()) for _ in range(WINDOW_SLOTS + FOR)]
    finally:
        run.close()
    assert {(row.state, row.observation) for row in rows} == {
        ("insufficient_data", "no_baseline")}
    assert all("run `evalfleet calibrate`" in str(row.note) for row in rows)


def test_the_shipped_rules_load_with_the_canary_series(settings: Settings) -> None:
    from evalfleet.core.metric import load_registry

    drift = [r for r in load_rules(None, registry=load_registry()).rules
             if r.spec.kind == "judge_drift"]
    # Each shipped drift rule's window holds at least min_samples canaries at the defaults.
    per_window = {r.name: r.spec.window.total_seconds() / settings.alerts.canary_interval_s
                  * settings.alerts.canary_samples for r in drift}
    assert all(per_window[r.name] >= r.spec.min_samples for r in drift)


def test_canary_verdicts_that_fail_to_parse_add_no_agreement(
    settings: Settings, sim: RunningSim, start_worker: Callable[..., WorkerProcess],
    store: VerdictStore, open_engine: Callable[..., AlertEngine], tmp_path: Path,
    database_url: str,
) -> None:
    metric = "rag_qa"
    start_worker(settings, queues=[metric])
    calibrate(settings, metric)
    sim.configure(truncated_rate=1.0)  # cut off: never completed by guessing
    engine = open_engine(drift_rule(metric, "faithfulness"))
    run = Run(settings, store, engine, metric, tmp_path)
    try:
        row = drift_row(run.step())
    finally:
        run.close()
    statuses = {record.status for record in store.iter_verdicts(purposes=["canary"])}
    assert statuses == {"failed"}
    with psycopg.connect(database_url.replace("+psycopg", "")) as conn:
        assert conn.execute("SELECT count(*) FROM verdict_scores").fetchone() == (0,)
    assert (row.state, row.observation, row.n) == ("no_data", "no_data", 0)  # not a breach


def test_two_beats_feed_canaries_through_the_fleet_and_each_is_judged_once(
    settings: Settings, sim: RunningSim, start_worker: Callable[..., WorkerProcess],
    store: VerdictStore, tmp_path: Path,
) -> None:
    gold = tmp_path / "gold"
    gold.mkdir()
    shutil.copy(bundled_gold("rag_qa"), gold / "rag_qa.jsonl")
    fleet = settings.model_copy(update={"canary_interval_s": 2.0, "canary_samples": 3,
                                        "canary_gold_dir": gold})
    start_worker(fleet, queues=["rag_qa"])
    beats = []
    try:
        for n in range(2):
            data_dir = tmp_path / f"beat-{n}"  # each beat its own schedule file
            with (tmp_path / f"beat-{n}.log").open("wb") as log:
                beats.append(subprocess.Popen(
                    [sys.executable, "-m", "evalfleet", "beat"],
                    env={**os.environ, **fleet.model_copy(
                        update={"data_dir": data_dir}).as_environment()},
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        def both_fed_three_slots() -> bool:
            # A loaded machine may start one beat after the other has fed three slots.
            slots = {v.key.sample_id.split(":")[1] for v in store.iter_verdicts(
                purposes=["canary"])}
            return len(slots) >= 3 and all(
                "Sending due task evalfleet-canaries" in (tmp_path / f"beat-{n}.log").read_text()
                for n in range(2))

        wait_until(both_fed_three_slots, timeout_s=120,
                   what="canaries of three slots, and both beats sending canary rounds")
    finally:
        for beat in beats:
            stop_process(beat)
    logs = [(tmp_path / f"beat-{n}.log").read_text() for n in range(2)]
    assert all("Sending due task evalfleet-canaries" in log for log in logs)  # both fed
    assert "canaries of slot" in "".join(logs)
    canaries = list(store.iter_verdicts(purposes=["canary"]))
    assert all(v.key.sample_id.startswith("canary:") for v in canaries)
    assert {v.status for v in canaries} == {"ok"}
    # Both beats fed the same slots; a canary's key is judged once.
    wait_until(lambda: sim.stats()["requests"] == len(list(store.iter_verdicts(
        purposes=["canary"]))), timeout_s=30, what="every judged canary stored")
    assert run_cli_export(fleet) == []  # canaries stay out of the production export


def run_cli_export(settings: Settings) -> list[str]:
    result = CliRunner().invoke(main, ["export"], env=settings.as_environment(),
                                catch_exceptions=False)
    return result.output.splitlines()
