"""Readiness decisions: the judge probe's answers, and all checks together."""

from __future__ import annotations

import pytest

from workers.health.readiness import CheckResult, assess_readiness, judge_result


@pytest.mark.parametrize(("status_code", "ok", "reachable", "detail"), [
    (200, True, True, "HTTP 200"),
    (204, True, True, "HTTP 204"),
    (404, True, True, "HTTP 404"),  # up, without a /models route
    (429, True, True, "rate limiting"),
    (401, False, True, "refuses the API key"),  # reachable, but every call would fail
    (403, False, True, "refuses the API key"),
    (500, False, True, "failing"),
    (503, False, True, "failing"),
    (None, False, False, "ConnectError"),
])
def test_judge_answers(status_code: int | None, ok: bool, reachable: bool, detail: str) -> None:
    result = judge_result(status_code=status_code, error="ConnectError: refused")
    assert (result.name, result.ok, result.reachable) == ("judge", ok, reachable)
    assert detail in result.detail


BROKER = CheckResult.passed("broker")
DATABASE = CheckResult.passed("database")
JUDGE = CheckResult.passed("judge", "HTTP 200")


@pytest.mark.parametrize(("checks", "draining", "ready", "reason"), [
    ([BROKER, DATABASE, JUDGE], False, True, "every check passed"),
    ([BROKER, DATABASE, JUDGE], True, False, "shutting down"),
    ([CheckResult.unreachable("broker", "refused"), DATABASE, JUDGE], False, False,
     "broker: refused"),
    ([BROKER, CheckResult.unreachable("database", "timeout"),
      judge_result(status_code=401)], False, False,
     "database: timeout; judge: HTTP 401"),
])
def test_readiness(checks: list[CheckResult], draining: bool, ready: bool,
                   reason: str) -> None:
    readiness = assess_readiness(checks, draining=draining)
    assert readiness.ready is ready
    assert reason in readiness.reason
    assert readiness.checks == tuple(checks)
