"""A real HTTP receiver for alert notifications: records every request, can fail the first N."""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


@dataclass(frozen=True)
class Received:
    """One request as the receiver saw it."""

    path: str
    headers: dict[str, str]
    body: bytes
    status: int
    """What the receiver answered."""

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    """A Starlette app under uvicorn in a thread, on a free port."""

    def __init__(self) -> None:
        self.requests: list[Received] = []
        self.fail_first = 0
        self.fail_status = 503
        self._lock = threading.Lock()
        app = Starlette(routes=[Route("/{path:path}", self._handle, methods=["POST"])])
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                                log_config=None)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run,
                                        kwargs={"sockets": [self._sock]}, daemon=True)
        self._thread.start()
        while not self._server.started:
            time.sleep(0.005)

    async def _handle(self, request: Request) -> JSONResponse:
        body = await request.body()
        with self._lock:
            failing = self.fail_first > 0
            if failing:
                self.fail_first -= 1
            status = self.fail_status if failing else 200
            self.requests.append(Received(request.url.path, dict(request.headers), body, status))
        return JSONResponse({"status": "failed" if failing else "success"}, status_code=status)

    @property
    def accepted(self) -> list[Received]:
        """Requests answered with 200."""
        return [r for r in self.requests if r.status == 200]

    def alerts(self) -> list[dict[str, Any]]:
        """Every alert accepted at Alertmanager's v2 endpoint, in order."""
        return [alert for r in self.accepted if r.path == "/api/v2/alerts" for alert in r.json]

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(5)
        self._sock.close()
