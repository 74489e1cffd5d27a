"""A real Prometheus scrapes a small fleet: a worker, the ingest service and ``evalfleet beat``.

Samples go in through ``evalfleet produce`` and ``POST /v1/samples``; the worker judges
them with the simulator (some replies malformed, a fleet rate limit, priced tokens); the
beat sees the support bot's faithfulness drop and notifies a webhook. Prometheus, which
also loads ops/prometheus/alerts.yml, must then hold the documented series with their
labels and values that agree with the store, and every metric the Grafana dashboard reads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalfleet.core.settings import Settings
from evalfleet.judgesim import RunningSim
from evalfleet.store import VerdictStore
from tests.evalfleet.alerts.conftest import write_rules
from tests.evalfleet.alerts.receiver import Receiver
from tests.helpers import WorkerProcess, wait_until
from tests.ops.dashboard import ROOT, dashboard_expressions, metric_names
from tests.ops.servers import Prometheus, free_port, get_json, ready, stop_process
from tests.ops.traffic import traffic, write_jsonl

pytestmark = pytest.mark.timeout(240)


class Child:
    """An ``evalfleet`` command running in the background, its output in a log file."""

    def __init__(self, settings: Settings, *args: str, log_path: Path) -> None:
        self.log_path = log_path
        with log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "evalfleet", *args],
                env={**os.environ, **settings.as_environment()}, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)

    def stop(self) -> None:
        stop_process(self.process)


@pytest.fixture
def children() -> Iterator[list[Any]]:
    """What a test started (anything with ``stop()``), stopped in reverse order."""
    running: list[Any] = []
    yield running
    for child in reversed(running):
        child.stop()


def value(prometheus: Prometheus, promql: str) -> float:
    """The single value of an instant query (NaN when it has none)."""
    result = prometheus.query(promql)
    return float(result[0]["value"][1]) if len(result) == 1 else float("nan")


def post_samples(url: str, samples: list[dict[str, object]]) -> int:
    request = urllib.request.Request(f"{url}/v1/samples", method="POST",
                                     data=json.dumps({"samples": samples}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return int(response.status)


def test_prometheus_scrapes_the_documented_series_of_a_running_fleet(
    settings: Settings, sim: RunningSim, store: VerdictStore, tmp_path: Path,
    children: list[Any],
) -> None:
    now = datetime.now(UTC)
    history = traffic("support-bot", count=100, start=now - timedelta(hours=2), minutes=100,
                      mean=0.85, seed=1)
    drop = traffic("support-bot", count=30, start=now - timedelta(minutes=8), minutes=7,
                   mean=0.55, seed=2)
    receiver = Receiver()
    rules = write_rules(tmp_path / "rules.yaml", {
        "name": "faithfulness_drop", "segment_by": ["app"], "window": "10m",
        "interval": "1m", "min_samples": 20, "min_effect": 0.05, "mode": "baseline",
        "baseline": {"type": "trailing", "window": "2h", "gap": "0s"}, "for": 1,
        "receivers": ["hook"]},
        receivers={"hook": {"type": "webhook", "url": f"{receiver.url}/hook"}})
    ports = {"worker": free_port(), "beat": free_port(), "ingest": free_port()}
    fleet = settings.model_copy(update={
        "alert_rules_file": rules, "alert_webhook_secret": "hook-secret", "alert_tick_s": 1.0,
        "judge_rpm": 1500.0, "model_prices": {settings.judge.judge_model: (1.0, 2.0)},
    })
    sim.configure(malformed_rate=0.1)
    try:
        worker = WorkerProcess(fleet.model_copy(update={"metrics_port": ports["worker"]}),
                               queues=["rag_qa"], concurrency=8,
                               log_path=tmp_path / "worker.log")
        children.append(worker)
        ingest = Child(fleet, "ingest", "--port", str(ports["ingest"]), "--no-auth",
                       "--metric", "rag_qa", log_path=tmp_path / "ingest.log")
        children.append(ingest)
        worker.wait_ready()
        ingest_url = f"http://127.0.0.1:{ports['ingest']}"
        wait_until(lambda: ready(f"{ingest_url}/healthz"), timeout_s=60, what="ingest up")

        produced = subprocess.run(
            [sys.executable, "-m", "evalfleet", "produce",
             str(write_jsonl(tmp_path / "history.jsonl", history)), "--metric", "rag_qa"],
            env={**os.environ, **fleet.as_environment()}, capture_output=True, timeout=120,
            check=False)
        assert produced.returncode == 0, produced.stderr
        assert post_samples(ingest_url, drop) == 202
        total = len(history) + len(drop)
        wait_until(lambda: store.counts().verdicts == total, timeout_s=120,
                   what="every verdict")

        beat = Child(fleet.model_copy(update={"metrics_port": ports["beat"]}), "beat",
                     log_path=tmp_path / "beat.log")
        children.append(beat)
        prometheus = Prometheus(tmp_path / "prometheus", targets={
            "evalfleet-workers": [f"127.0.0.1:{ports['worker']}"],
            "evalfleet-ingest": [f"127.0.0.1:{ports['ingest']}"],
            "evalfleet-beat": [f"127.0.0.1:{ports['beat']}"],
        }, rule_files=[ROOT / "ops" / "prometheus" / "alerts.yml"])
        children.append(prometheus)
        wait_until(lambda: receiver.accepted, timeout_s=90, what="the beat's notification")
        wait_until(lambda: value(prometheus, 'sum(evalfleet_alert_notifications_total'
                                             '{receiver="hook", outcome="delivered"})') >= 1,
                   timeout_s=30, what="the notification counted in Prometheus")
        # The outbox may deliver before the cycle that queued it records its figures (the
        # firing segment last), so a scrape can hold the notification without them.
        wait_until(lambda: value(prometheus, 'evalfleet_alert_segments{rule="faithfulness_drop",'
                                             ' state="firing"}') >= 1,
                   timeout_s=30, what="the cycle's figures counted in Prometheus")

        jobs = ("evalfleet-workers", "evalfleet-ingest", "evalfleet-beat")
        wait_until(lambda: all(value(prometheus, f'up{{job="{job}"}}') == 1 for job in jobs),
                   timeout_s=30, what="every target scraped")
        exported = list(store.iter_verdicts(metric="rag_qa"))
        ok = sum(1 for verdict in exported if verdict.status == "ok")
        assert value(prometheus, 'sum(evalfleet_verdicts_total{job="evalfleet-workers", '
                                 'metric="rag_qa", status="ok", app="support-bot"})') == ok
        assert value(prometheus, 'sum(evalfleet_verdicts_total{metric="rag_qa"})') == total
        mean = value(prometheus, 'sum(evalfleet_verdict_score_sum{score="faithfulness"}) / '
                                 'sum(evalfleet_verdict_score_count{score="faithfulness"})')
        assert 0.7 < mean < 0.85, mean
        assert value(prometheus, 'sum(evalfleet_judge_errors_total{metric="rag_qa"})') >= 1
        assert value(prometheus, 'sum(evalfleet_judge_cost_usd_total{metric="rag_qa"})') > 0
        assert value(prometheus, 'sum(evalfleet_rate_limiter_wait_seconds_count'
                                 '{metric="rag_qa"})') >= 1
        assert value(prometheus, 'evalfleet_queue_depth{job="evalfleet-workers", '
                                 'queue="eval.rag_qa"}') == 0
        assert value(prometheus, 'sum(evalfleet_producer_records_total'
                                 '{job="evalfleet-ingest"})') == len(drop)
        assert value(prometheus, 'sum(evalfleet_alert_evaluations_total'
                                 '{rule="faithfulness_drop"})') >= 1
        assert value(prometheus, 'evalfleet_alert_segments{rule="faithfulness_drop", '
                                 'state="firing"}') >= 1
        window = value(prometheus, 'evalfleet_alert_window_mean{rule="faithfulness_drop", '
                                   'segment="app=support-bot"}')
        baseline = value(prometheus, 'evalfleet_alert_baseline_mean{rule="faithfulness_drop",'
                                     ' segment="app=support-bot"}')
        assert window < 0.65 < 0.8 < baseline, (window, baseline)

        used = set().union(*(metric_names(expr) for expr in dashboard_expressions()))
        assert used <= prometheus.names(), sorted(used - prometheus.names())
        for rule_group in prometheus_rules(prometheus):
            for rule in rule_group["rules"]:
                assert rule["health"] == "ok", rule
    finally:
        receiver.stop()


def prometheus_rules(prometheus: Prometheus) -> list[dict[str, Any]]:
    wait_until(lambda: all(rule.get("health") == "ok" for group in
                           get_json(f"{prometheus.url}/api/v1/rules")["data"]["groups"]
                           for rule in group["rules"]),
               timeout_s=30, what="every shipped rule evaluated")
    groups = get_json(f"{prometheus.url}/api/v1/rules")["data"]["groups"]
    shipped = yaml.safe_load((ROOT / "ops" / "prometheus" / "alerts.yml").read_text())
    assert sum(len(g["rules"]) for g in groups) == sum(len(g["rules"])
                                                       for g in shipped["groups"])
    return list(groups)
