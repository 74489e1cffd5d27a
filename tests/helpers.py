"""Helpers for tests that drive real processes: polling and worker subprocesses."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

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


@contextmanager
def database_outage(database_url: str) -> Iterator[None]:
    """The test database stops taking connections (and drops the open ones) inside the
    block, as a Postgres that went away would; it takes them again afterwards."""
    database = database_url.rsplit("/", 1)[1]
    admin_url = database_url.rsplit("/", 1)[0].replace("+psycopg", "") + "/postgres"
    allow_connections(admin_url, database, allow=False)
    try:
        yield
    finally:
        allow_connections(admin_url, database, allow=True)


def allow_connections(admin_url: str, database: str, *, allow: bool) -> None:
    """Let ``database`` take connections again, or refuse new ones and end the open ones."""
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS {str(allow).lower()}')
        if not allow:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = %s AND pid <> pg_backend_pid()", [database])
