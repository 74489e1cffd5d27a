"""Is a worker ready? Pure decisions over the results of its dependency checks.

A worker is ready when its broker, its database and its judge all answer, and
it is not shutting down. The checks themselves (I/O) are in
:mod:`workers.health.checks`; here each outcome becomes a :class:`CheckResult`.

The named judge endpoints of cascade tiers (``EVALFLEET_JUDGE_ENDPOINTS``) are checked
too, but are not required: a job whose tier's endpoint is down escalates to the next
tier (its breaker opens, and the tier's answer counts as no answer), so such a worker
still judges. A failing one is reported as degraded, in the reason and in its check,
and the worker stays ready; restarting it, or holding a rollout back, would not help.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from evalfleet.core.errors import JudgeError


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one readiness check. Build with the named constructors."""

    name: str
    """``broker``, ``database``, ``judge`` or ``judge endpoint <name>``."""
    ok: bool
    detail: str
    reachable: bool = True
    """False when nothing answered at all (connection refused, timeout)."""
    required: bool = True
    """False for a dependency the worker judges without (a cascade tier's named
    endpoint): its failure degrades the worker, it does not make it not ready."""

    def optional(self) -> CheckResult:
        """This result, for a dependency the worker can do without."""
        return replace(self, required=False)

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


def judge_result(error: JudgeError | None, *, name: str = "judge") -> CheckResult:
    """Classify the judge's answer to the readiness probe (its provider's model list).

    Args:
        error: What asking for the list ended with; None when the judge listed its models.
        name: The check's name (``judge``, or ``judge endpoint <name>``).

    Returns:
        Passed for a list, for 429 (the judge is up and busy) and for other 4xx but
        401 and 403 (up, without a ``/models`` route); refused for 401 and 403 (the
        key is rejected: every call would fail) and for 5xx; unreachable without an
        answer (connection refused, a timeout).
    """
    if error is None:
        return CheckResult.passed(name, "models listed")
    status_code = error.status_code
    if status_code is None:
        return CheckResult.unreachable(name, str(error) or "no answer")
    if status_code in (401, 403):
        return CheckResult.refused(name, f"HTTP {status_code}: the judge refuses the API key")
    if status_code >= 500:
        return CheckResult.refused(name, f"HTTP {status_code}: the judge is failing")
    if status_code == 429:
        return CheckResult.passed(name, "HTTP 429: up, rate limiting")
    return CheckResult.passed(name, f"HTTP {status_code}: up")


def assess_readiness(checks: Sequence[CheckResult], *, draining: bool) -> Readiness:
    """Decide whether a worker is ready.

    Args:
        checks: One result per dependency.
        draining: True once the worker is shutting down.

    Returns:
        Ready when not draining and every required check passed; a failed optional
        check is named in the reason as degraded.
    """
    if draining:
        return Readiness(False, "shutting down", tuple(checks))
    failed = [check for check in checks if not check.ok and check.required]
    degraded = [check for check in checks if not check.ok and not check.required]
    if failed:
        reason = "; ".join(f"{check.name}: {check.detail}" for check in failed + degraded)
        return Readiness(False, reason, tuple(checks))
    reason = "every check passed"
    if degraded:
        reason = "degraded (ready): " + "; ".join(f"{check.name}: {check.detail}"
                                                  for check in degraded)
    return Readiness(True, reason, tuple(checks))
