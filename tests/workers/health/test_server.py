"""``/livez`` and ``/readyz`` over HTTP, in process and on a real worker (every broker),
and ``evalfleet worker-health`` for exec probes."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from evalfleet.core.endpoint import JudgeEndpoint
from evalfleet.core.message import new_job
from evalfleet.core.sample import parse_sample
from evalfleet.core.settings import Settings
from evalfleet.judgesim import RunningSim
from producers.enqueuer import Enqueuer
from tests.brokers import EVERY_BROKER
from tests.helpers import WorkerProcess, wait_until
from tests.test_fleet import cli
from workers.app import create_app
from workers.health import WorkerActivity, WorkerHealth, serve_health


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(port: int, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def enqueue(settings: Settings, count: int) -> None:
    enqueuer = Enqueuer(settings)
    enqueuer.send_many([new_job("rag_qa", parse_sample({"id": f"h{n}", "input": "q",
                                                         "output": "a"}))
                        for n in range(count)])
    enqueuer.close()


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


@pytest.fixture
def served(settings: Settings) -> Iterator[tuple[int, WorkerActivity, Clock]]:
    clock = Clock()
    activity = WorkerActivity(clock=clock)
    health = WorkerHealth.from_settings(settings, activity=activity, queues=["eval.rag_qa"],
                                        clock=clock)
    port = free_port()
    server = serve_health(health, port=port, host="127.0.0.1")
    yield port, activity, clock
    server.shutdown()
    server.server_close()


def test_livez_fails_only_while_work_waits_and_nothing_happens(
    settings: Settings, served: tuple[int, WorkerActivity, Clock],
) -> None:
    port, activity, clock = served
    assert get(port, "/livez") == (200, {
        "live": True, "reason": "last progress 0 s ago", "waiting": {}, "started": 0,
        "finished": 0, "running": 0, "paused": []})
    clock.now_s += settings.worker.liveness_stall_s
    status, body = get(port, "/livez")
    assert status == 200 and body["reason"] == "no work waiting"
    enqueue(settings, 3)  # one message of three jobs
    status, body = get(port, "/livez")
    assert status == 503 and body["waiting"] == {"eval.rag_qa": 1}, body
    activity.started()
    assert get(port, "/livez")[0] == 200
    clock.now_s += settings.worker.liveness_stall_s
    activity.pause("eval.rag_qa", for_s=60)
    assert get(port, "/livez")[0] == 200


def test_readyz_checks_every_dependency_and_fails_while_shutting_down(
    served: tuple[int, WorkerActivity, Clock],
) -> None:
    port, activity, _ = served
    status, body = get(port, "/readyz")
    assert status == 200 and body["ready"], body
    assert set(body["checks"]) == {"broker", "database", "judge"}
    assert all(check["ok"] for check in body["checks"].values())
    activity.drain()
    assert get(port, "/readyz") == (503, {**body, "ready": False, "reason": "shutting down"})
    assert get(port, "/nope")[0] == 404


def test_readyz_names_the_dependency_that_does_not_answer(settings: Settings) -> None:
    broken = settings.model_copy(update={"openai_base_url": "http://127.0.0.1:1/v1",
                                         "readiness_timeout_s": 1})
    port = free_port()
    server = serve_health(WorkerHealth.from_settings(broken, activity=WorkerActivity(),
                                                     queues=["eval.rag_qa"]),
                          port=port, host="127.0.0.1")
    try:
        status, body = get(port, "/readyz")
    finally:
        server.shutdown()
        server.server_close()
    assert status == 503 and body["reason"].startswith("judge: cannot reach the judge")
    assert body["checks"]["broker"]["ok"] and body["checks"]["database"]["ok"]
    assert body["checks"]["judge"] == {
        "ok": False,
        "reachable": False,
        "required": True,
        "detail": body["reason"].removeprefix("judge: "),
    }


def test_a_named_endpoint_that_is_down_degrades_a_ready_worker(
    settings: Settings, sim: RunningSim
) -> None:
    """A cascade tier's endpoint down: its jobs escalate, so the worker stays ready and
    says which endpoint fails; one that answers is reported passed."""
    named = settings.model_copy(
        update={
            "readiness_timeout_s": 1,
            "judge_endpoints": {
                "local": JudgeEndpoint(base_url=sim.base_url),
                "backup": JudgeEndpoint(base_url="http://127.0.0.1:1/v1"),
            },
        }
    )
    port = free_port()
    server = serve_health(
        WorkerHealth.from_settings(named, activity=WorkerActivity(), queues=["eval.rag_qa"]),
        port=port,
        host="127.0.0.1",
    )
    try:
        status, body = get(port, "/readyz")
    finally:
        server.shutdown()
        server.server_close()
    assert status == 200 and body["ready"], body
    assert body["reason"].startswith("degraded (ready): judge endpoint backup: cannot reach")
    assert body["checks"]["judge endpoint local"] == {
        "ok": True,
        "reachable": True,
        "required": False,
        "detail": "models listed",
    }
    backup = body["checks"]["judge endpoint backup"]
    assert (backup["ok"], backup["reachable"], backup["required"]) == (False, False, False)


@EVERY_BROKER
def test_a_worker_that_stops_consuming_with_work_waiting_is_not_live(
    settings: Settings, start_worker: Callable[..., WorkerProcess], tmp_path: Path,
) -> None:
    settings = settings.model_copy(update={"health_port": free_port(), "liveness_stall_s": 5})
    worker = start_worker(settings, queues=["rag_qa"])
    wait_until(lambda: get(settings.worker.health_port, "/readyz")[0] == 200, timeout_s=10,
               what="the worker ready")
    live = cli(settings, "worker-health", "--live")
    assert live.exit_code == 0 and live.output.startswith("live: "), live.output
    ready = cli(settings, "worker-health", "--ready")
    assert ready.exit_code == 0 and ready.output.startswith("ready: "), ready.output
    # The worker stops consuming (as a consumer stuck on a lost connection would); jobs wait.
    app = create_app(settings, concurrency=1)
    app.control.cancel_consumer("eval.rag_qa", reply=True, timeout=5)
    app.close()
    enqueue(settings, 3)
    wait_until(lambda: get(settings.worker.health_port, "/livez")[0] == 503, timeout_s=20,
               what="the worker reported not live")
    live = cli(settings, "worker-health", "--live")
    assert live.exit_code == 1, live.output
    assert live.output.startswith("not live: messages wait in eval.rag_qa (1)"), live.output
    worker.stop()
    unreachable = cli(settings, "worker-health", "--ready", "--timeout", "2")
    assert unreachable.exit_code == 1 and "no answer" in unreachable.output


def test_worker_health_needs_a_port(settings: Settings) -> None:
    result = cli(settings, "worker-health", "--ready")
    assert result.exit_code == 2 and "EVALFLEET_HEALTH_PORT" in result.output
