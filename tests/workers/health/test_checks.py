"""The I/O checks against the real services: broker (every broker), database, judge."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from evalfleet.core.endpoint import JudgeEndpoint
from evalfleet.core.errors import BrokerUnavailable
from evalfleet.core.message import new_job
from evalfleet.core.sample import parse_sample
from evalfleet.core.settings import Settings
from evalfleet.judgesim import RunningSim
from producers.enqueuer import Enqueuer
from tests.brokers import EVERY_BROKER
from workers.health.checks import DatabaseProbe, broker_probe, judge_probe, run_checks
from workers.health.readiness import CheckResult


@contextmanager
def answering(status: int) -> Iterator[str]:
    """A judge whose every answer is ``status``; yields its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"error": {"message": f"status {status}"}}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


@EVERY_BROKER
def test_the_broker_probe_reads_queue_depths(settings: Settings) -> None:
    enqueuer = Enqueuer(settings)
    for n in range(3):
        enqueuer.send(new_job("rag_qa", parse_sample({"id": f"s{n}", "input": "q",
                                                      "output": "a"})))
    enqueuer.close()
    probe = broker_probe(settings)
    assert probe.depths(["eval.rag_qa", "eval.never_declared"]) == {
        "eval.rag_qa": 3, "eval.never_declared": 0}
    assert probe.check() == CheckResult.passed("broker")


@pytest.mark.parametrize("url", ["redis://:s3cret@127.0.0.1:1/0",
                                 "amqp://guest:s3cret@127.0.0.1:1//"])
def test_an_unreachable_broker_fails_fast_without_its_password(
    settings: Settings, url: str,
) -> None:
    probe = broker_probe(settings.model_copy(update={"broker_url": url,
                                                     "readiness_timeout_s": 1}))
    started = time.monotonic()
    result = probe.check()
    assert not result.ok and not result.reachable
    assert "s3cret" not in result.detail
    with pytest.raises(BrokerUnavailable):
        probe.depths(["eval.rag_qa"])
    assert time.monotonic() - started < 10


def test_the_database_probe(database_url: str) -> None:
    assert DatabaseProbe(database_url, timeout_s=2).check().ok
    down = DatabaseProbe("postgresql+psycopg://postgres@127.0.0.1:1/evalfleet", timeout_s=1)
    result = down.check()
    assert not result.ok and not result.reachable and "OperationalError" in result.detail


def test_the_judge_probe(settings: Settings, sim: RunningSim) -> None:
    """Through the provider contract: the lean client and the openai client alike, the
    judge and each named endpoint, with the settings' credentials."""
    for client in ("http", "openai"):
        probe = judge_probe(settings.model_copy(update={"judge_client": client}))
        try:
            assert probe.check() == CheckResult.passed("judge", "models listed")
        finally:
            probe.close()
    with answering(401) as base_url:
        refused = judge_probe(settings.model_copy(update={"openai_base_url": base_url}))
        try:
            result = refused.check()
        finally:
            refused.close()
    assert (result.ok, result.reachable) == (False, True)
    assert "refuses the API key" in result.detail
    with answering(404) as base_url:  # up, without a /models route: still up
        routeless = judge_probe(settings.model_copy(update={"openai_base_url": base_url}))
        try:
            assert routeless.check() == CheckResult.passed("judge", "HTTP 404: up")
        finally:
            routeless.close()
    down = settings.model_copy(
        update={
            "openai_base_url": "http://127.0.0.1:1/v1",
            "judge_endpoints": {"local": JudgeEndpoint(base_url=sim.base_url)},
        }
    )
    probe = judge_probe(down)
    try:
        result = probe.check()
        local = probe.check_endpoint("local")
        assert [name for name, _ in probe.checks()] == ["judge", "judge endpoint local"]
    finally:
        probe.close()
    assert not result.ok and not result.reachable
    assert local == CheckResult.passed("judge endpoint local", "models listed").optional()


def test_a_judge_probe_that_gets_no_answer_in_time_is_unreachable(settings: Settings) -> None:
    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        base_url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        probe = judge_probe(
            settings.model_copy(update={"openai_base_url": base_url, "readiness_timeout_s": 0.2})
        )
        try:
            result = probe.check()
        finally:
            probe.close()
    assert (result.ok, result.reachable) == (False, False)
    assert "within 0.2 s" in result.detail


def test_checks_run_together_and_a_slow_one_times_out() -> None:
    def slow() -> CheckResult:
        time.sleep(5)
        return CheckResult.passed("slow")

    def broken() -> CheckResult:
        raise RuntimeError("bug")

    started = time.monotonic()
    results = run_checks([("fast", lambda: CheckResult.passed("fast")), ("slow", slow),
                          ("other-slow", slow), ("broken", broken)], timeout_s=0.5)
    assert time.monotonic() - started < 1.5
    assert [(r.name, r.ok) for r in results] == [("fast", True), ("slow", False),
                                                ("other-slow", False), ("broken", False)]
    assert "within 0.5 s" in results[1].detail and "RuntimeError" in results[3].detail
