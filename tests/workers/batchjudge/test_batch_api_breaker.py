"""The Batch API's circuit breaker against a real HTTP server that answers 500 for a
while: it opens (calls fail unsent), lets one probe through once its time is up, and
closes when the provider answers again."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from evalfleet.core.errors import JudgeError, JudgeUnavailable
from workers.batchjudge.api import BatchApi
from workers.breaker import CircuitBreaker


class Provider(ThreadingHTTPServer):
    """Answers every request 500 while ``down``, else a batch object (a file: 404);
    counts requests."""

    down = True
    requests = 0


class Handler(BaseHTTPRequestHandler):
    server: Provider

    def do_GET(self) -> None:
        self.server.requests += 1
        if self.server.down:
            status, body = 500, {"error": {"message": "down"}}
        elif self.path.startswith("/v1/files/"):
            status, body = 404, {"error": {"message": "no such file"}}
        else:
            status, body = 200, {"id": "batch-1", "status": "in_progress"}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def provider() -> Iterator[Provider]:
    server = Provider(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_a_batch_api_answering_500_opens_the_breaker_and_a_probe_closes_it(
        provider: Provider) -> None:
    now = [0.0]
    api = BatchApi(f"http://127.0.0.1:{provider.server_port}/v1", timeout_s=10,
                   breaker=CircuitBreaker(failure_threshold=3, open_s=30.0),
                   clock=lambda: now[0])
    try:
        for _ in range(3):
            with pytest.raises(JudgeUnavailable, match="500"):
                api.retrieve("batch-1")
        assert api.breaker.state == "open" and provider.requests == 3
        # Open: refused at once, nothing sent, however often a round asks.
        for _ in range(10):
            with pytest.raises(JudgeUnavailable, match="circuit is open"):
                api.retrieve("batch-1")
        assert provider.requests == 3
        # Time up, still down: one probe goes, and the circuit opens again for longer.
        now[0] = 31.0
        with pytest.raises(JudgeUnavailable, match="500"):
            api.retrieve("batch-1")
        assert api.breaker.state == "open" and provider.requests == 4
        now[0] = 62.0
        with pytest.raises(JudgeUnavailable, match="circuit is open"):
            api.retrieve("batch-1")  # twice as long the second time
        # The provider is back: the next probe closes the circuit.
        provider.down = False
        now[0] = 92.0
        assert api.retrieve("batch-1")["status"] == "in_progress"
        assert api.breaker.state == "closed" and provider.requests == 5
        assert api.retrieve("batch-1")["id"] == "batch-1" and provider.requests == 6
    finally:
        api.close()


def test_a_client_error_is_no_transport_failure(provider: Provider) -> None:
    provider.down = False
    api = BatchApi(f"http://127.0.0.1:{provider.server_port}/v1", timeout_s=10,
                   breaker=CircuitBreaker(failure_threshold=1))
    try:
        for _ in range(3):
            with pytest.raises(JudgeError, match="404"):
                api.content("no-such-file")
        assert api.breaker.state == "closed" and provider.requests == 3
    finally:
        api.close()
