"""Helpers for tests that drive real processes: polling and worker subprocesses."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from evalfleet.core.errors import JudgeDeferred, JudgeError
from evalfleet.core.settings import Settings
from workers.judge import JudgeClient, JudgeReply, JudgeRequest


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


def queued(client: Any, metric: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The ``(job message, task headers)`` waiting in ``eval.<metric>`` on Redis, oldest first."""
    messages = []
    for raw in reversed(client.lrange(f"eval.{metric}", 0, -1)):
        envelope = json.loads(raw)
        args, _, _ = json.loads(base64.b64decode(envelope["body"]))
        message = args[0]
        # A batch message carries several jobs: list each as a job of its own.
        common = {"v": message.get("v"), "metric": message.get("metric")}
        for job in message.get("jobs", [message]):
            messages.append(({**common, **job}, envelope["headers"]))
    return messages


def queued_ids(client: Any, metric: str) -> list[str]:
    """Sample ids of the jobs waiting in ``eval.<metric>``, oldest first."""
    return [job["sample"]["id"] for job, _ in queued(client, metric)]


class DeferringJudge(JudgeClient):
    """Sends nothing: every call is deferred for ``wait_s`` (an open circuit, a spent budget)."""

    def __init__(self, wait_s: float) -> None:
        self.wait_s = wait_s

    def complete_many(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply | JudgeError]:
        return [JudgeDeferred("circuit open", retry_after_s=self.wait_s) for _ in requests]
