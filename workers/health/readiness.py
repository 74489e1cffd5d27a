"""Is a worker ready? Pure decisions over the results of its dependency checks.

A worker is ready when its broker, its database and its judge all answer, and
it is not shutting down. The checks themselves (I/O) are in
:mod:`workers.health.checks`; here each outcome becomes a :class:`CheckResult`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one readiness check. Build with the named constructors."""

    name: str
    """``broker``, ``database`` or ``judge``."""
    ok: bool
    detail: str
    reachable: bool = True
    """False when nothing answered at all (connection refused, timeout)."""

    @classmethod
    def passed(cls, name: str, detail: str = "ok") -> CheckResult:
        """The dependency answered as it should."""
        return cls(name, True, detail)

    @classmethod
    def refused(cls, name: str, detail: str) -> CheckResult:
        """The dependency answered, but cannot serve this worker (e.g. a rejected key)."""
        return cls(name, False, detail)

    @classmethod
    def unreachable(cls, name: str, detail: str) -> CheckResult:
        """Nothing answered."""
        return cls(name, False, detail, reachable=False)


@dataclass(frozen=True)
class Readiness:
    """The answer of ``/readyz``."""

    ready: bool
    reason: str
    checks: tuple[CheckResult, ...] = ()


def judge_result(*, status_code: int | None, error: str = "") -> CheckResult:
    """Classify the judge's answer to the readiness probe (``GET {base_url}/models``).

    Args:
        status_code: The HTTP status; None when the request failed.
        error: Why it failed (connection refused, timeout).

    Returns:
        Passed for 2xx, for 429 (the judge is up and busy) and for other 4xx but
        401 and 403 (up, without a ``/models`` route); refused for 401 and 403 (the
        key is rejected: every call would fail) and for 5xx; unreachable without an
        answer.
    """
    if status_code is None:
        return CheckResult.unreachable("judge", error or "no answer")
    if status_code in (401, 403):
        return CheckResult.refused("judge", f"HTTP {status_code}: the judge refuses the API key")
    if status_code >= 500:
        return CheckResult.refused("judge", f"HTTP {status_code}: the judge is failing")
    if status_code == 429:
        return CheckResult.passed("judge", "HTTP 429: up, rate limiting")
    return CheckResult.passed("judge", f"HTTP {status_code}")


def assess_readiness(checks: Sequence[CheckResult], *, draining: bool) -> Readiness:
    """Decide whether a worker is ready.

    Args:
        checks: One result per dependency.
        draining: True once the worker is shutting down.

    Returns:
        Ready when not draining and every check passed.
    """
    if draining:
        return Readiness(False, "shutting down", tuple(checks))
    failed = [check for check in checks if not check.ok]
    if failed:
        reason = "; ".join(f"{check.name}: {check.detail}" for check in failed)
        return Readiness(False, reason, tuple(checks))
    return Readiness(True, "every check passed", tuple(checks))
