"""Running the judge simulator: serving it in this thread, or from a background thread.

:func:`serve` runs until interrupted (``evalfleet judge-sim`` calls it through
:func:`run_judge_sim`); :func:`start_in_thread` starts one for a test and hands
back a :class:`RunningSim`, which talks to it over HTTP. Both bind the socket
first, so port 0 picks a free port that is known before uvicorn starts.
"""

from __future__ import annotations

import http.client
import json
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import uvicorn
from starlette.applications import Starlette

from evalfleet.core.errors import EvalfleetError
from evalfleet.judgesim.config import InvalidSimConfig, SimConfig
from evalfleet.judgesim.faults import InvalidScript
from evalfleet.judgesim.replies import prompt_key
from evalfleet.judgesim.server import SimNotStarted, create_app

#: Idle keep-alive connections are closed after this many seconds.
KEEP_ALIVE_S = 75

#: Default port of ``serve``.
DEFAULT_PORT = 8400


def serve(
    config: SimConfig, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
    ready: Callable[[str], None] | None = None,
) -> None:
    """Run the simulator in this thread until interrupted (SIGINT or SIGTERM).

    Prints ``judge-sim listening on http://HOST:PORT/v1`` to stderr once it accepts
    requests. On SIGINT or SIGTERM it stops gracefully (in-flight requests get 5 s), then
    uvicorn raises the signal again, so the process ends with the status of that signal.

    Args:
        config: The initial configuration.
        host: Address to listen on.
        port: Port to listen on; 0 picks a free one (the printed line names it).
        ready: Called with the base URL (ending in ``/v1``) once it accepts requests.

    Raises:
        OSError: When the address cannot be bound.
    """
    sock = _bind(host, port)
    server = _uvicorn_server(create_app(config), graceful_s=5, quiet=False)
    base_url = _base_url(host, sock.getsockname()[1])

    def announce() -> None:
        while not server.started and not server.should_exit:
            time.sleep(0.01)
        if server.started:
            print(f"judge-sim listening on {base_url}", file=sys.stderr, flush=True)
            if ready is not None:
                ready(base_url)

    threading.Thread(target=announce, name="judge-sim-announce", daemon=True).start()
    try:
        server.run(sockets=[sock])
    finally:
        server.should_exit = True
        sock.close()


def run_judge_sim(*, host: str = "127.0.0.1", port: int = DEFAULT_PORT, **options: Any) -> None:
    """Run the simulator from command-line options (for ``evalfleet judge-sim``).

    Args:
        host: Address to listen on.
        port: Port to listen on; 0 picks a free one.
        **options: :class:`SimConfig` fields by name (``seed``, ``latency``, ``latency_ms``,
            ``latency_min_ms``, ``latency_max_ms``, ``latency_median_ms``, ``latency_p99_ms``,
            ``rate_limit_rate``, ``server_error_rate``, ``hang_rate``, ``malformed_rate``,
            ``truncated_rate``, ``malformed_kinds``, ``retry_after_s``, ``hang_s``,
            ``rpm_limit``, ``models``). None and empty tuples (click's unset options) keep
            the default.

    Raises:
        InvalidSimConfig: Naming the first bad option (unknown, wrong type, out of range).
        OSError: When the address cannot be bound.
    """
    given = {name: value for name, value in options.items() if value is not None and value != ()}
    serve(SimConfig.build(given), host=host, port=port)


class RunningSim:
    """A simulator serving from a background thread; its methods talk to it over HTTP."""

    def __init__(self, server: uvicorn.Server, thread: threading.Thread, sock: socket.socket,
                 host: str, port: int) -> None:
        self._server = server
        self._thread = thread
        self._sock = sock
        self.host = host
        """Address it listens on."""
        self.port = port
        """Port it listens on."""
        self.base_url = _base_url(host, port)
        """OpenAI base URL, ending in ``/v1``."""

    def stats(self) -> dict[str, Any]:
        """The counters of ``GET /_sim/stats``."""
        result: dict[str, Any] = self._call("GET", "/_sim/stats")
        return result

    def requests_for(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """How many chat requests carried exactly these messages' contents."""
        return int(self.stats()["by_prompt"].get(prompt_key(messages), 0))

    def script(self, rules: Sequence[Mapping[str, Any]]) -> None:
        """Replace the reply script (see ``POST /_sim/script``).

        Raises:
            InvalidScript: Naming the first bad field.
        """
        self._call("POST", "/_sim/script", {"rules": list(rules)}, error=InvalidScript)

    def configure(self, **changes: Any) -> SimConfig:
        """Change settings at runtime; fields left out keep their values.

        Returns:
            The configuration now in force.

        Raises:
            InvalidSimConfig: Naming the first bad field.
        """
        return SimConfig.build(self._call("PUT", "/_sim/config", changes, error=InvalidSimConfig))

    def current_config(self) -> SimConfig:
        """The configuration in force."""
        return SimConfig.build(self._call("GET", "/_sim/config"))

    def reset(self) -> None:
        """Clear counters, script and rate window, and re-seed; the configuration stays."""
        self._call("POST", "/_sim/reset")

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop serving; requests still in flight get about a second to finish."""
        self._server.should_exit = True
        self._thread.join(timeout_s)
        self._sock.close()

    def __enter__(self) -> RunningSim:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _call(self, method: str, path: str, body: Any = None,
              error: type[EvalfleetError] = EvalfleetError) -> Any:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            payload = None if body is None else json.dumps(body)
            connection.request(method, path, body=payload,
                               headers={"content-type": "application/json"})
            response = connection.getresponse()
            data = json.loads(response.read() or b"null")
        finally:
            connection.close()
        if response.status >= 400:
            raise error(data["error"]["message"])
        return data


def start_in_thread(
    config: SimConfig | None = None, *, host: str = "127.0.0.1", port: int = 0,
    start_timeout_s: float = 10.0,
) -> RunningSim:
    """Start a simulator in a daemon thread and wait until it accepts requests.

    Args:
        config: The initial configuration; None for the defaults.
        host: Address to listen on.
        port: Port to listen on; 0 (the default) picks a free one.
        start_timeout_s: How long to wait for it to listen.

    Returns:
        The running simulator; call ``stop()`` or use it as a context manager.

    Raises:
        SimNotStarted: When it is not listening within ``start_timeout_s``.
        OSError: When the address cannot be bound.
    """
    sock = _bind(host, port)
    server = _uvicorn_server(create_app(config), graceful_s=1, quiet=True)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="judge-sim",
                              daemon=True)
    bound_port = sock.getsockname()[1]
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            sock.close()
            raise SimNotStarted(f"judge-sim did not start on {host}:{bound_port}")
        time.sleep(0.005)
    return RunningSim(server, thread, sock, host, bound_port)


def _bind(host: str, port: int) -> socket.socket:
    """A bound socket, so the real port is known before the server starts (port 0)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _uvicorn_server(app: Starlette, *, graceful_s: int, quiet: bool) -> uvicorn.Server:
    # Access logs cost CPU at thousands of requests/s; uvloop and httptools are used
    # when installed (uvicorn's "auto").
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="off", server_header=False,
        timeout_keep_alive=KEEP_ALIVE_S, timeout_graceful_shutdown=graceful_s, backlog=4096,
        log_config=None if quiet else uvicorn.config.LOGGING_CONFIG,
    )
    return uvicorn.Server(config)


def _base_url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/v1"
