"""Processes a test or a benchmark drives: polling for a condition, a worker child."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from evalfleet.core.settings import Settings


def wait_until(predicate: Callable[[], object], *, timeout_s: float, what: str,
               interval_s: float = 0.2) -> None:
    """Poll ``predicate`` until it is truthy; fail the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


class WorkerProcess:
    """An ``evalfleet worker`` child process with its log captured."""

    def __init__(self, settings: Settings, *, queues: list[str], concurrency: int,
                 log_path: Path) -> None:
        env = {**os.environ, **settings.as_environment()}
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "evalfleet", "worker", "--queues", ",".join(queues),
             "--concurrency", str(concurrency), "--loglevel", "INFO"],
            env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
        )

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Block until the worker logs that it is ready."""
        wait_until(lambda: b" ready." in self.log_path.read_bytes() or self.process.poll()
                   is not None, timeout_s=timeout_s, what="worker ready")
        assert self.process.poll() is None, self.log_path.read_text()

    def kill(self) -> None:
        """SIGKILL the worker: no shutdown, no acks, nothing flushed."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        """Warm shutdown (SIGTERM), then SIGKILL if it hangs."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()
