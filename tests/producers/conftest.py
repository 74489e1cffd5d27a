"""Producer fixtures: settings on the session's Redis database, and a throwaway Redis."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from evalfleet.core.settings import Settings
from tests.producers.builders import producer_settings
from tests.tools import require_tool


@pytest.fixture
def psettings(redis_url: str, tmp_path: Path) -> Settings:
    """Producer settings on this test's Redis database."""
    return producer_settings(redis_url, tmp_path)


class OwnRedis:
    """A redis-server of this test's own, on a free port, that the test may stop."""

    def __init__(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the server and wait until it answers."""
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--daemonize", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError("own redis-server did not start")

    def stop(self) -> None:
        """Kill the server (as a crash would)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def own_redis() -> Iterator[OwnRedis]:
    """A started redis-server on a free port; killed at teardown (never the shared one)."""
    require_tool("redis-server")
    server = OwnRedis()
    server.start()
    yield server
    server.stop()
