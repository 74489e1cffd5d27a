"""A worker's ``/livez`` and ``/readyz`` over HTTP, from a daemon thread.

``GET /livez``: 200 when live, 503 when work waits and the worker does nothing
about it (see :mod:`workers.health.liveness`). ``GET /readyz``: 200 when the
broker, the database and the judge answer and the worker is not shutting down,
else 503; a cascade tier's named endpoint that fails is reported, degraded, without
making the worker not ready (:mod:`workers.health.readiness`). Both answer JSON with
the reason. Kubernetes probes them with ``httpGet``; ``evalfleet worker-health`` is
the same for exec probes.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from evalfleet.core.errors import BrokerUnavailable
from evalfleet.core.settings import Settings
from workers.health.activity import WorkerActivity
from workers.health.checks import (
    BrokerProbe,
    DatabaseProbe,
    broker_probe,
    judge_probe,
    run_checks,
)
from workers.health.liveness import Liveness, assess_liveness, needs_depths
from workers.health.readiness import CheckResult, Readiness, assess_readiness

logger = logging.getLogger(__name__)


class WorkerHealth:
    """Answers liveness and readiness for one worker process.

    Args:
        activity: The worker's activity.
        queues: The queues it consumes.
        broker: Reads their depths.
        checks: The readiness checks, by name.
        stall_s: ``EVALFLEET_LIVENESS_STALL_S``.
        timeout_s: How long the readiness checks may take together.
        clock: Monotonic seconds (the activity's clock).
    """

    def __init__(
        self, *, activity: WorkerActivity, queues: Sequence[str], broker: BrokerProbe,
        checks: Sequence[tuple[str, Callable[[], CheckResult]]], stall_s: float,
        timeout_s: float, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.activity = activity
        self._queues = list(queues)
        self._broker = broker
        self._checks = list(checks)
        self._stall_s = stall_s
        self._timeout_s = timeout_s
        self._clock = clock

    @classmethod
    def from_settings(cls, settings: Settings, *, activity: WorkerActivity,
                      queues: Sequence[str],
                      clock: Callable[[], float] = time.monotonic) -> WorkerHealth:
        """Health of a worker configured by ``settings`` consuming ``queues``."""
        broker = broker_probe(settings)
        database = DatabaseProbe(settings.resolved_database_url(),
                                 timeout_s=settings.worker.readiness_timeout_s)
        judge = judge_probe(settings)
        return cls(activity=activity, queues=queues, broker=broker,
                   checks=[("broker", broker.check), ("database", database.check),
                           *judge.checks()],
                   stall_s=settings.worker.liveness_stall_s,
                   timeout_s=settings.worker.readiness_timeout_s + 1.0, clock=clock)

    def live(self) -> Liveness:
        """Liveness now; reads queue depths only when the worker made no recent progress."""
        activity, now_s = self.activity.snapshot(), self._clock()
        depths, error = None, ""
        if needs_depths(activity, now_s=now_s, stall_s=self._stall_s):
            try:
                depths = self._broker.depths(self._queues)
            except BrokerUnavailable as exc:
                error = str(exc)
        return assess_liveness(activity, now_s=now_s, stall_s=self._stall_s, depths=depths,
                               depth_error=error)

    def ready(self) -> Readiness:
        """Readiness now: every check, at once."""
        results = run_checks(self._checks, timeout_s=self._timeout_s)
        return assess_readiness(results, draining=self.activity.snapshot().draining)

    def livez(self) -> tuple[int, dict[str, Any]]:
        """The ``/livez`` status and body."""
        liveness, activity = self.live(), self.activity.snapshot()
        body = {"live": liveness.live, "reason": liveness.reason, "waiting": liveness.waiting,
                "started": activity.started, "finished": activity.finished,
                "running": activity.running, "paused": sorted(activity.paused)}
        return (200 if liveness.live else 503), body

    def readyz(self) -> tuple[int, dict[str, Any]]:
        """The ``/readyz`` status and body."""
        readiness = self.ready()
        checks = {check.name: {key: value for key, value in asdict(check).items()
                               if key != "name"} for check in readiness.checks}
        body = {"ready": readiness.ready, "reason": readiness.reason, "checks": checks}
        return (200 if readiness.ready else 503), body


def serve_health(health: WorkerHealth, *, port: int,
                 host: str = "0.0.0.0") -> ThreadingHTTPServer:
    """Serve ``/livez`` and ``/readyz`` on ``port`` from a daemon thread.

    Args:
        health: What answers.
        port: The port (``EVALFLEET_HEALTH_PORT``).
        host: Address to listen on.

    Returns:
        The server (``shutdown()`` stops it).
    """
    routes: dict[str, Callable[[], tuple[int, dict[str, Any]]]] = {
        "/livez": health.livez, "/readyz": health.readyz,
    }

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            route = routes.get(self.path.split("?", 1)[0])
            if route is None:
                status, body = 404, {"error": "not found; try /livez or /readyz"}
            else:
                status, body = route()
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            return  # probes every few seconds would drown the worker's log

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="health-server", daemon=True)
    thread.start()
    logger.info("health endpoints on http://%s:%s/livez and /readyz", host, port)
    return server
