"""Producers end to end, as a new user would run them: ``evalfleet ingest`` and
``evalfleet produce --follow`` as processes, an ``evalfleet worker``, Postgres and
the judge simulator. Verdicts arrive for exactly the samples the configured rates
keep; bad records get clear errors; nothing accepted is lost.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from pydantic import SecretStr

from evalfleet.cli import main
from evalfleet.core.settings import Settings
from evalfleet.sdk import Submitter
from producers.sampler import is_sampled
from tests.brokers import EVERY_BROKER
from tests.helpers import WorkerProcess, wait_until
from tests.producers.builders import APPS, record

TOKEN = "tok-e2e"

CONFIG = """
segments: {by: [app]}
metrics:
  rag_qa: {rate: 0.5}
  context_precision: {rate: 1.0, where: {app: support-bot}}
"""


def export(settings: Settings) -> list[dict[str, Any]]:
    result = CliRunner().invoke(main, ["export"], env=settings.as_environment(),
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def verdict_keys(settings: Settings) -> list[tuple[str, str]]:
    return [(v["metric"], v["sample_id"]) for v in export(settings)]


def expected_keys(numbers: range) -> set[tuple[str, str]]:
    keys = set()
    for n in numbers:
        sample_id = f"req-{n:05d}"
        if is_sampled(sample_id, 0.5, metric="rag_qa"):
            keys.add(("rag_qa", sample_id))
        if APPS[n % 3] == "support-bot":
            keys.add(("context_precision", sample_id))
    return keys


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def configured(settings: Settings, tmp_path: Path) -> Settings:
    """The test settings with the sampling config and an ingest token."""
    config = tmp_path / "sampling.yaml"
    config.write_text(CONFIG)
    return settings.model_copy(update={"sampling_config": config,
                                       "ingest_tokens": SecretStr(TOKEN)})


@pytest.fixture
def start_process(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start ``evalfleet ARGS`` processes; each is stopped at teardown."""
    started: list[subprocess.Popen[bytes]] = []

    def start(settings: Settings, *args: str, log: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, **settings.as_environment()}
        stream = (tmp_path / log).open("ab")
        process = subprocess.Popen([sys.executable, "-m", "evalfleet", *args], env=env,
                                   stdout=stream, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, and a clean exit (uvicorn re-raises the signal once it has shut down)."""
    os.killpg(process.pid, signal.SIGTERM)
    assert process.wait(timeout=30) in (0, 1, -signal.SIGTERM)


def test_an_application_posting_to_ingest_gets_verdicts_at_the_configured_rates(
    configured: Settings, start_process: Callable[..., subprocess.Popen[bytes]],
    start_worker: Callable[..., WorkerProcess], tmp_path: Path,
) -> None:
    port = free_port()
    ingest = start_process(configured, "ingest", "--port", str(port), log="ingest.log")
    base = f"http://127.0.0.1:{port}"
    wait_until(lambda: _answers(f"{base}/readyz"), timeout_s=30, what="the ingest service")
    start_worker(configured, queues=["rag_qa", "context_precision"], concurrency=16)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
        single = client.post("/v1/samples", json=record(0))
        assert single.status_code == 202, single.text
        reports = [single.json()]
        for start in range(1, 120, 40):
            batch = [record(n) for n in range(start, start + 40)]
            batch[5] = {**batch[5], "output": ""}  # lacks the metrics' input
            response = client.post("/v1/samples", json={"samples": batch})
            assert response.status_code == 422, response.text  # one bad record named...
            reports.append(response.json())
        assert client.post("/v1/samples", json=record(1),
                           headers={"Authorization": "Bearer nope"}).status_code == 403
    bad = {f"req-{start + 5:05d}" for start in range(1, 120, 40)}
    for report in reports[1:]:  # one error per metric that picked the bad record
        assert report["rejections"]
        for rejection in report["rejections"]:
            assert rejection["field"] == "output" and rejection["index"] == 5
            assert rejection["id"] in bad and "is required by this metric" in rejection["error"]
    # ...and the good records of those batches accepted all the same.
    want = {key for key in expected_keys(range(121)) if key[1] not in bad}
    assert sum(sum(r["jobs"].values()) for r in reports) == len(want)
    wait_until(lambda: len(export(configured)) >= len(want), timeout_s=90,
               what=f"{len(want)} verdicts")
    keys = verdict_keys(configured)
    assert set(keys) == want and len(keys) == len(want)  # each once, none lost
    assert all(v["status"] == "ok" for v in export(configured))
    stop(ingest)
    assert "Finished server process" in (tmp_path / "ingest.log").read_text()


def test_a_followed_log_gets_verdicts_across_rotation_and_restart(
    configured: Settings, start_process: Callable[..., subprocess.Popen[bytes]],
    start_worker: Callable[..., WorkerProcess], tmp_path: Path,
) -> None:
    log = tmp_path / "traffic.log"
    follow_args = ("produce", str(log), "--follow", "--batch-size", "25")

    def append(numbers: range, path: Path = log) -> None:
        with path.open("a") as stream:
            for n in numbers:
                stream.write(json.dumps(record(n)) + "\n")

    append(range(0, 60))
    with log.open("a") as stream:
        stream.write('{"id": "broken", "input": \n')
    metrics_port = free_port()
    producer = start_process(configured, *follow_args, "--metrics-port", str(metrics_port),
                             log="follow-1.log")
    start_worker(configured, queues=["rag_qa", "context_precision"], concurrency=16)
    wait_until(lambda: len(export(configured)) >= len(expected_keys(range(60))), timeout_s=60,
               what="verdicts for the first lines")
    scraped = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
    assert 'evalfleet_producer_records_total{outcome="accepted",source="follow"}' in scraped
    assert 'evalfleet_producer_records_total{outcome="rejected",source="follow"} 1.0' in scraped
    os.rename(log, tmp_path / "traffic.log.1")
    append(range(60, 70), tmp_path / "traffic.log.1")
    append(range(70, 90))
    time.sleep(2.0)  # the producer finishes the rotated file and moves on
    stop(producer)
    append(range(90, 120))
    start_process(configured, *follow_args, log="follow-2.log")
    want = expected_keys(range(120))
    wait_until(lambda: len(export(configured)) >= len(want), timeout_s=90,
               what=f"{len(want)} verdicts")
    keys = verdict_keys(configured)
    assert set(keys) == want and len(keys) == len(want)
    first_log = (tmp_path / "follow-1.log").read_text()
    assert "traffic.log line 61: not valid JSON" in first_log
    assert "jobs enqueued:" in first_log  # the summary on SIGTERM


def test_a_delayed_metric_is_judged_after_its_delay(
    settings: Settings, start_worker: Callable[..., WorkerProcess], tmp_path: Path,
) -> None:
    config = tmp_path / "sampling.yaml"
    config.write_text("metrics: {rag_qa: {rate: 1.0, delay_s: 2.5}}")
    delayed = settings.model_copy(update={"sampling_config": config})
    start_worker(delayed, queues=["rag_qa"])
    submitter = Submitter(delayed)
    enqueued_at = time.monotonic()
    for n in range(3):
        submitter.submit(record(n))
    assert submitter.flush(timeout_s=10)
    submitter.close()
    time.sleep(max(0.0, 1.5 - (time.monotonic() - enqueued_at)))
    assert export(delayed) == []  # not before the delay
    wait_until(lambda: len(export(delayed)) == 3, timeout_s=30, what="3 delayed verdicts")
    assert time.monotonic() - enqueued_at >= 2.5


def test_a_delay_longer_than_the_visibility_timeout_is_refused(
    settings: Settings, tmp_path: Path,
) -> None:
    config = tmp_path / "sampling.yaml"
    config.write_text("metrics: {rag_qa: {delay_s: 60}}")
    input_path = tmp_path / "s.jsonl"
    input_path.write_text(json.dumps(record(1)) + "\n")
    result = CliRunner().invoke(main, ["produce", str(input_path), "--sampling-config",
                                       str(config)], env=settings.as_environment())
    assert result.exit_code == 2
    assert "metrics.rag_qa.delay_s: 60 s does not fit in EVALFLEET_VISIBILITY_TIMEOUT_S" \
        in result.output


@EVERY_BROKER
def test_produce_prints_what_it_shed_and_redacted(settings: Settings, tmp_path: Path) -> None:
    config = tmp_path / "sampling.yaml"
    config.write_text("segments: {by: [app]}\nmetrics: {rag_qa: {max_queue_depth: 10}}")
    input_path = tmp_path / "s.jsonl"
    input_path.write_text("".join(json.dumps(record(n, input=f"mail u{n}@x.io")) + "\n"
                                  for n in range(30)))
    result = CliRunner().invoke(main, ["produce", str(input_path), "--sampling-config",
                                       str(config)], env=settings.as_environment())
    assert result.exit_code == 0, result.output
    assert "30 lines, 30 valid, 0 sampled out, 0 rejected; jobs enqueued: rag_qa 10" \
        in result.stderr
    assert "shed under backpressure (queue over its limit): rag_qa [app=docs-search] " \
        in result.stderr
    assert "redacted: email 30" in result.stderr  # before shedding: nothing leaves unredacted


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
