"""Real Prometheus and Alertmanager servers for a test: free ports, a temp dir, stopped after.

The binaries come from Debian's ``prometheus`` and ``prometheus-alertmanager`` packages
(.ci/run installs them); a missing one fails the test that needs it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.helpers import wait_until
from tests.tools import require_tool

#: Longest wait for a server to come up, in seconds.
START_TIMEOUT_S = 60.0


def free_port() -> int:
    """A port free right now on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def binary(*names: str) -> str:
    return require_tool(*names)


def get_json(url: str, timeout_s: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return json.loads(response.read())


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def stop_process(process: subprocess.Popen[bytes], *, timeout_s: float = 30.0) -> None:
    """SIGTERM the child's process group, SIGKILL it if it outlives ``timeout_s``."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


class Server:
    """A server child process with its log in the temp dir."""

    def __init__(self, args: list[str], *, root: Path, name: str, ready_path: str,
                 port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = root / f"{name}.log"
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True, cwd=root)
        try:
            wait_until(lambda: ready(self.url + ready_path) or self.process.poll() is not None,
                       timeout_s=START_TIMEOUT_S, what=f"{name} ready")
            assert self.process.poll() is None, self.log_path.read_text()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        stop_process(self.process)


class Prometheus(Server):
    """``prometheus`` scraping ``targets`` ({job: ["host:port", ...]}) every second."""

    def __init__(self, root: Path, *, targets: dict[str, list[str]],
                 rule_files: Sequence[Path] = ()) -> None:
        root.mkdir(parents=True, exist_ok=True)
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": hosts}]}
                               for job, hosts in targets.items()],
            "rule_files": [str(path) for path in rule_files],
        }
        (root / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = free_port()
        super().__init__([binary("prometheus"), f"--config.file={root / 'prometheus.yml'}",
                          f"--storage.tsdb.path={root / 'data'}",
                          f"--web.listen-address=127.0.0.1:{port}"],
                         root=root, name="prometheus", ready_path="/-/ready", port=port)

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's result vector."""
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        answer = get_json(url)
        assert answer["status"] == "success", answer
        return list(answer["data"]["result"])

    def names(self) -> set[str]:
        """Every metric name Prometheus has stored."""
        return set(get_json(f"{self.url}/api/v1/label/__name__/values")["data"])


class Alertmanager(Server):
    """``prometheus-alertmanager`` with ``config``, clustering off."""

    def __init__(self, root: Path, *, config: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        port = free_port()
        super().__init__([binary("prometheus-alertmanager", "alertmanager"),
                          f"--config.file={config}", f"--storage.path={root / 'data'}",
                          f"--web.listen-address=127.0.0.1:{port}",
                          "--cluster.listen-address="],
                         root=root, name="alertmanager", ready_path="/-/ready", port=port)

    def alerts(self, **filters: str) -> list[dict[str, Any]]:
        """Alerts in API v2 (``active``, ``silenced``, ``inhibited``... as query flags)."""
        query = urllib.parse.urlencode(filters)
        return list(get_json(f"{self.url}/api/v2/alerts?{query}"))
