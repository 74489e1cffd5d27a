"""A real HTTP receiver for alert notifications: records every request, can fail the first N."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from testkit.served import Served


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
        self._served = Served(app)
        self.url = self._served.url

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
        self._served.stop()
