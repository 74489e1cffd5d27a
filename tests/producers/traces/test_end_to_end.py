"""Traces end to end, as a team would run them: an application instrumented by a real
OpenTelemetry instrumentation package exports over OTLP/HTTP (configured by ``OTEL_*``
variables only) to ``evalfleet ingest``; a worker judges; ``evalfleet export`` shows
the kept sample with the question, the answer, the retrieved documents and the
segments. One ingest, worker and judge simulator serve every case of the module.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import redis
from click.testing import CliRunner
from pydantic import SecretStr

from evalfleet.cli import main
from evalfleet.core.settings import Settings
from evalfleet.judgesim import RunningSim
from evalfleet.store.schema import metadata
from tests.helpers import WorkerProcess, wait_until
from tests.producers.test_end_to_end import free_port
from tests.producers.traces.builders import json_request, json_span
from tests.producers.traces.otel_app import DOCUMENTS

#: The repository's root folder.
REPOSITORY = Path(__file__).resolve().parents[3]

TOKEN = "tok-otel"
CONFIG = "metrics: {rag_qa: {rate: 1.0}}\ntraces: {segments: {tenant: app.tenant}}\n"


class Fleet:
    """``evalfleet ingest`` (restartable) and one worker on the test services."""

    def __init__(self, settings: Settings, folder: Path) -> None:
        self.settings = settings
        self.folder = folder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ingest: subprocess.Popen[bytes] | None = None

    def start_ingest(self) -> None:
        env = {**os.environ, **self.settings.as_environment()}
        log = (self.folder / "ingest.log").open("ab")
        ingest = self.ingest = subprocess.Popen(
            [sys.executable, "-m", "evalfleet", "ingest", "--port", str(self.port)],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        # As long as a worker may take to start on a loaded machine; an ingest that
        # exits (its port taken meanwhile) fails at once, with its log.
        wait_until(lambda: ingest.poll() is not None or self._ready(), timeout_s=60,
                   what="evalfleet ingest")
        assert ingest.poll() is None, (self.folder / "ingest.log").read_text()

    def kill_ingest(self) -> None:
        assert self.ingest is not None
        os.killpg(self.ingest.pid, signal.SIGKILL)
        self.ingest.wait()

    def run_app(self, convention: str, question: str, *, split: str | None = None) -> Any:
        """Run the instrumented app; ``split`` is ``pause`` (2 s between the exports) or
        ``restart`` (the ingest killed and restarted between them)."""
        env = {**os.environ, **_otel_environment(self.url, self.settings)}
        app = subprocess.Popen(
            [sys.executable, "-m", "tests.producers.traces.otel_app", convention, question,
             *(["--split"] if split else [])],
            # From the repository's root, where ``tests`` is found, whatever folder this
            # test runs in (tests run in a temporary one).
            cwd=REPOSITORY, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE)
        assert app.stdin is not None and app.stdout is not None
        if split:
            if app.stdout.readline().strip() != b"exported":
                raise AssertionError(app.communicate(timeout=30)[1].decode())
            if split == "restart":
                self.kill_ingest()
                self.start_ingest()
            else:
                time.sleep(2)  # the scenario: the second export two seconds after the first
            app.stdin.write(b"go\n")
            app.stdin.flush()
        out, err = app.communicate(timeout=60)
        assert app.returncode == 0, err.decode()
        return json.loads(out.splitlines()[-1])

    def verdicts(self) -> dict[str, dict[str, Any]]:
        result = CliRunner().invoke(main, ["export", "--with-sample"],
                                    env=self.settings.as_environment(), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        rows = [json.loads(line) for line in result.stdout.splitlines()]
        return {row["sample_id"]: row for row in rows}

    def verdict(self, sample_id: str) -> dict[str, Any]:
        wait_until(lambda: sample_id in self.verdicts(), timeout_s=60,
                   what=f"a verdict for {sample_id}")
        return self.verdicts()[sample_id]

    def stop(self) -> None:
        if self.ingest is not None and self.ingest.poll() is None:
            self.kill_ingest()

    def _ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False


def _otel_environment(url: str, settings: Settings) -> dict[str, str]:
    return {
        "OTEL_SERVICE_NAME": "support-bot",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{url}/v1/traces",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS": f"Authorization=Bearer%20{TOKEN}",
        "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
        # The official GenAI instrumentation puts messages on spans only with these.
        "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY",
        "OPENAI_BASE_URL": str(settings.judge.openai_base_url), "OPENAI_API_KEY": "app-key",
    }


def empty_session_services(postgres_url: str, redis_session_url: str) -> None:
    """The session's database and Redis database emptied for a module's fleet (the
    per-test fixtures empty them per test; a module-wide fleet outlives one test)."""
    with psycopg.connect(postgres_url.replace("+psycopg", ""), autocommit=True) as conn:
        conn.execute(f"TRUNCATE {', '.join(t.name for t in metadata.sorted_tables)} CASCADE")
    client = redis.Redis.from_url(redis_session_url)
    for key in client.scan_iter("*"):
        if not key.startswith(b"evalfleet-test-session"):
            client.delete(key)


@contextmanager
def agent_fleet(folder: Path, *, config: str, metric: str, postgres_url: str, redis_url: str,
                sim: RunningSim, **more: Any) -> Iterator[Fleet]:
    """The ingest and one worker of ``metric`` for a module of agent tests, on emptied
    services, with ``config`` as the sampling config and ``more`` settings."""
    empty_session_services(postgres_url, redis_url)
    (folder / "sampling.yaml").write_text(config)
    settings = Settings(
        database_url=postgres_url, broker_url=redis_url,
        openai_base_url=sim.base_url, data_dir=folder / "data", judge_timeout_s=5,
        retry_base_s=0.2, retry_max_s=2.0, visibility_timeout_s=15, worker_concurrency=4,
        sampling_config=folder / "sampling.yaml", ingest_tokens=SecretStr(TOKEN),
        otlp_quiet_s=1.0, otlp_max_wait_s=2.0, **more)
    with running_fleet(settings, folder, queue=metric, concurrency=4) as fleet:
        yield fleet


@contextmanager
def running_fleet(settings: Settings, folder: Path, *, queue: str,
                  concurrency: int) -> Iterator[Fleet]:
    """The ingest and one worker of ``queue``, both stopped on leaving, also when one of
    them failed to start: a fleet left running after a failed start would go on sweeping
    traces and taking jobs on the session's Redis database, under the tests that follow."""
    fleet = Fleet(settings, folder)
    worker: WorkerProcess | None = None
    try:
        fleet.start_ingest()
        worker = WorkerProcess(settings, queues=[queue], concurrency=concurrency,
                               log_path=folder / "worker.log")
        worker.wait_ready()
        yield fleet
    finally:
        if worker is not None:
            worker.stop()
        fleet.stop()


@pytest.fixture(scope="module")
def fleet(postgres_url: str, redis_session_url: str, sim_session: RunningSim,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    folder = tmp_path_factory.mktemp("otel")
    empty_session_services(postgres_url, redis_session_url)
    (folder / "sampling.yaml").write_text(CONFIG)
    settings = Settings(
        database_url=postgres_url, broker_url=redis_session_url,
        openai_base_url=sim_session.base_url, data_dir=folder / "data", judge_timeout_s=2,
        retry_base_s=0.2, retry_max_s=2.0, visibility_timeout_s=7, worker_concurrency=8,
        sampling_config=folder / "sampling.yaml", ingest_tokens=SecretStr(TOKEN),
        otlp_quiet_s=1.0)
    with running_fleet(settings, folder, queue="rag_qa", concurrency=8) as fleet:
        yield fleet


def check_sample(verdict: dict[str, Any], *, question: str, answer: str,
                 model: str = "app-model") -> None:
    assert verdict["status"] == "ok", verdict
    sample = verdict["sample"]
    assert sample["input"] == question and sample["output"] == answer
    assert sample["context"] == DOCUMENTS
    assert verdict["attributes"] == {"app": "support-bot", "route": "/chat", "model": model,
                                     "tenant": "acme"}
    assert sample["fields"] == {"trace_id": verdict["sample_id"]}


@pytest.mark.parametrize("convention", ["openinference", "genai", "openllmetry"])
def test_an_instrumented_app_is_judged_with_its_retrieved_documents(
        fleet: Fleet, convention: str) -> None:
    question = f"Can I pause my subscription? ({convention})"
    run = fleet.run_app(convention, question)
    check_sample(fleet.verdict(run["trace_id"]), question=question, answer=run["answer"])


@pytest.mark.parametrize(("convention", "split"), [("genai", "pause"),
                                                   ("openinference", "restart")])
def test_a_trace_exported_in_two_requests_is_assembled(fleet: Fleet, convention: str,
                                                        split: str) -> None:
    question = f"How long can a pause last? ({split})"
    run = fleet.run_app(convention, question, split=split)
    check_sample(fleet.verdict(run["trace_id"]), question=question, answer=run["answer"])


def test_otlp_json_with_bad_spans_judges_the_good_and_names_the_bad(fleet: Fleet) -> None:
    trace_id = "7" * 32
    root, retriever, llm = "1" * 16, "2" * 16, "3" * 16
    good = [
        json_span(root, trace_id=trace_id, name="POST /chat", end_ns=3_000_000_000,
                  attributes={"http.route": "/chat", "app.tenant": "acme"}),
        json_span(retriever, trace_id=trace_id, parent=root, attributes={
            "openinference.span.kind": "RETRIEVER",
            **{f"retrieval.documents.{n}.document.content": d for n, d in enumerate(DOCUMENTS)}}),
        json_span(llm, trace_id=trace_id, parent=root, attributes={
            "gen_ai.operation.name": "chat", "gen_ai.response.model": "app-model",
            "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [
                {"type": "text", "content": "Pause?"}]}]),
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                {"type": "text", "content": "Up to three months."}]}])}),
    ]
    bad = [
        json_span("W46/95gDgQPSabY=", trace_id=trace_id, parent=root),
        json_span("4" * 16, trace_id=trace_id, parent=root, attributes={
            "gen_ai.input.messages": "[" * 5000 + "]" * 5000}),
        json_span("5" * 16, trace_id=trace_id, parent=root, attributes={
            "gen_ai.input.messages": "x" * 2_000_000}),
    ]
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json",
               "Content-Encoding": "gzip"}
    answer = httpx.post(f"{fleet.url}/v1/traces", headers=headers, timeout=30,
                        content=gzip.compress(json_request(*good, *bad)))
    assert answer.status_code == 200, answer.text
    partial = answer.json()["partialSuccess"]
    assert partial["rejectedSpans"] == 3
    message = partial["errorMessage"]
    assert f"trace {trace_id}, span ?, field spanId: must be 16 hex digits" in message
    assert f"span {'4' * 16}, field attributes[\"gen_ai.input.messages\"]: JSON text" in message
    assert f"span {'5' * 16}, field attributes[\"gen_ai.input.messages\"]: value over" in message
    deep = b'{"resourceSpans": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    refused = httpx.post(f"{fleet.url}/v1/traces", headers={**headers, "Content-Encoding":
                                                           "identity"}, content=deep)
    assert refused.status_code == 400
    assert "field resourceSpans: JSON nested deeper than 64" in refused.json()["message"]
    verdict = fleet.verdict(trace_id)
    assert verdict["sample"]["output"] == "Up to three months."
    check_sample(verdict, question="Pause?", answer="Up to three months.")


def test_a_collector_file_through_produce(fleet: Fleet, tmp_path: Path) -> None:
    trace_id = "8" * 32
    root, retriever, llm = "1" * 16, "2" * 16, "3" * 16
    lines = [
        json_request(json_span(retriever, trace_id=trace_id, parent=root, attributes={
            "openinference.span.kind": "RETRIEVER",
            **{f"retrieval.documents.{n}.document.content": d for n, d in enumerate(DOCUMENTS)}
        })),
        b"",
        b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "nothex"}]}]}]}',
        json_request(json_span(llm, trace_id=trace_id, parent=root, attributes={
            "openinference.span.kind": "LLM", "llm.model_name": "app-model",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": "Pause?",
            "llm.output_messages.0.message.content": "Up to three months."}),
            json_span(root, trace_id=trace_id, name="POST /chat", end_ns=3_000_000_000,
                      attributes={"http.route": "/chat", "app.tenant": "acme"})),
    ]
    path = tmp_path / "traces.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    result = CliRunner().invoke(main, ["produce", "--format", "otlp-json", str(path)],
                                env=fleet.settings.as_environment())
    assert result.exit_code == 1, result.output  # one bad span, named
    assert "line 3: trace ?, span ?, field traceId: must be 32 hex digits" in result.output
    assert "jobs enqueued: rag_qa 1" in result.output
    check_sample(fleet.verdict(trace_id), question="Pause?", answer="Up to three months.")
