"""The process pool team checks run in, each call killed at its time limit.

A worker runs its jobs in threads, and a thread cannot be stopped: a team check that
spins forever in a thread would hold it for good. Each team check call runs instead
in a child process of its own pool, one call at a time per process; the calling
thread waits for the answer up to the check's limit, and past it kills the process
(SIGKILL) and gives a ``check_timeout`` failure. A process that dies mid-call is a
``check_crashed`` failure. Either way the next call starts a fresh process, so a bad
check costs the jobs it runs for, never the worker.

Children are spawned (not forked: the worker has threads and open connections, which
a fork would copy half-held) and import only the team's module and the sample model.
"""

from __future__ import annotations

import importlib
import multiprocessing
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from evalfleet.core.sample import Sample
from workers.checks.result import (
    CHECK_CRASHED,
    CHECK_NOT_FOUND,
    CHECK_OFF_SCALE,
    CHECK_RAISED,
    CHECK_TIMEOUT,
    CheckResult,
)

#: Seconds a new check process may take to start before the call fails as crashed.
START_TIMEOUT_S = 60.0

#: Characters of a raised exception's message kept in the verdict's error.
_MESSAGE_CHARS = 300


class TeamCheckPool:
    """Up to ``processes`` child processes that run team check functions."""

    def __init__(self, *, processes: int) -> None:
        self._context = multiprocessing.get_context("spawn")
        self._slots = threading.BoundedSemaphore(processes)
        self._idle: list[_Child] = []
        self._lock = threading.Lock()
        self._closed = False

    def call(self, target: str, sample: Sample, params: dict[str, Any], *,
             timeout_s: float) -> CheckResult:
        """Run ``target`` (``module:function``) on ``sample`` in a child process.

        Args:
            target: The function.
            sample: Passed as its first argument.
            params: Passed as keyword arguments.
            timeout_s: Longest the call may run; the process is killed past it.

        Returns:
            The raw answer as a result with a ``(score, reason)`` shape checked (its
            scale is the caller's to check), or a named failure.
        """
        with self._slots:
            child = self._take()
            if child is None:
                return CheckResult.failure(CHECK_CRASHED, "the check process did not start")
            result, healthy = child.call(target, sample, params, timeout_s=timeout_s)
            self._give_back(child, healthy=healthy)
            return result

    def close(self) -> None:
        """Kill every idle child; calls still running end with their own."""
        with self._lock:
            self._closed = True
            children, self._idle = self._idle, []
        for child in children:
            child.kill()

    def _take(self) -> _Child | None:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return _Child.start(self._context)

    def _give_back(self, child: _Child, *, healthy: bool) -> None:
        with self._lock:
            if healthy and not self._closed:
                self._idle.append(child)
                return
        child.kill()


class _Child:
    """One check process and the parent's end of its pipe."""

    def __init__(self, process: Any, connection: Connection) -> None:
        self.process = process
        self.connection = connection
        self.loaded: set[str] = set()
        """Functions this process has imported (the import is not timed with a call)."""

    @classmethod
    def start(cls, context: Any) -> _Child | None:
        parent_end, child_end = context.Pipe()
        process = context.Process(target=serve, args=(child_end,), daemon=True,
                                  name="evalfleet-check")
        process.start()
        child_end.close()
        child = cls(process, parent_end)
        if not parent_end.poll(START_TIMEOUT_S):
            child.kill()
            return None
        try:
            parent_end.recv()  # "ready"
        except (EOFError, OSError):
            child.kill()
            return None
        return child

    def call(self, target: str, sample: Sample, params: dict[str, Any], *,
             timeout_s: float) -> tuple[CheckResult, bool]:
        """The call's result, and whether this process may serve another."""
        if target not in self.loaded:
            failure = self._load(target)
            if failure is not None:
                return failure, failure.error_class != CHECK_CRASHED
        try:
            self.connection.send(("call", target, sample, params))
        except (OSError, ValueError) as exc:  # a parameter that does not pickle, or a dead pipe
            return CheckResult.failure(CHECK_CRASHED, f"cannot send the call: {exc}"), False
        if not self.connection.poll(timeout_s):
            return CheckResult.failure(
                CHECK_TIMEOUT, f"ran past its limit of {timeout_s:g} s; its process was "
                "killed"), False
        try:
            kind, value = self.connection.recv()
        except (EOFError, OSError):
            self.process.join(1.0)
            return CheckResult.failure(
                CHECK_CRASHED, f"its process died (exit code {self.process.exitcode})"), False
        return _answer(kind, value), True

    def _load(self, target: str) -> CheckResult | None:
        """Import ``target`` in the child, allowed as long as a start (a team module may
        import much on first use); a failure, or None once it is loaded."""
        try:
            self.connection.send(("load", target))
            if not self.connection.poll(START_TIMEOUT_S):
                return CheckResult.failure(CHECK_CRASHED, f"importing {target} took over "
                                           f"{START_TIMEOUT_S:g} s")
            kind, value = self.connection.recv()
        except (EOFError, OSError) as exc:
            return CheckResult.failure(CHECK_CRASHED, f"its process died importing: {exc}")
        if kind != "loaded":
            return _answer(kind, value)
        self.loaded.add(target)
        return None

    def kill(self) -> None:
        self.process.kill()
        self.process.join(5.0)
        self.connection.close()


def _answer(kind: str, value: Any) -> CheckResult:
    if kind == "scored":
        score, reason = value
        return CheckResult.scored(score, reason)
    error_class = {"raised": CHECK_RAISED, "not_found": CHECK_NOT_FOUND}.get(kind, CHECK_OFF_SCALE)
    return CheckResult.failure(error_class, str(value))


def serve(connection: Connection) -> None:
    """A check process's loop: import, call and answer, until the pipe closes."""
    functions: dict[str, Callable[..., Any]] = {}
    connection.send("ready")
    while True:
        try:
            kind, target, *arguments = connection.recv()
        except (EOFError, OSError):
            return
        if kind == "load":
            connection.send(_import(functions, target))
        else:
            connection.send(_run(functions[target], *arguments))


def _import(functions: dict[str, Callable[..., Any]], target: str) -> tuple[str, Any]:
    try:
        functions[target] = _load(target)
    except BaseException as exc:  # an import that exits is a missing check too
        return "not_found", f"cannot load {target}: {type(exc).__name__}: {exc}"
    return "loaded", None


def _run(function: Callable[..., Any], sample: Sample, params: dict[str, Any]) -> tuple[str, Any]:
    try:
        answer = function(sample, **params)
    except BaseException as exc:  # SystemExit and KeyboardInterrupt from a check are failures too
        message = str(exc)[:_MESSAGE_CHARS]
        return "raised", f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return _shape(answer)


def _load(target: str) -> Callable[..., Any]:
    module_name, _, name = target.partition(":")
    function = getattr(importlib.import_module(module_name), name)
    if not callable(function):
        raise TypeError(f"{name} is not callable")
    return function


def _shape(answer: Any) -> tuple[str, Any]:
    """A ``(score, reason)`` answer in plain types, or why it is not one."""
    if (isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[1], str)
            and isinstance(answer[0], bool | int | float)):
        score, reason = answer
        try:
            return "scored", (score if isinstance(score, bool) else float(score), reason)
        except OverflowError:
            pass
    shown = repr(answer)[:_MESSAGE_CHARS]
    return "off_scale", f"returned {shown}, not a (score, reason) pair"
