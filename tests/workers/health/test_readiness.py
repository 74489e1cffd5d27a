"""Readiness decisions: the judge probe's answers, and all checks together."""

from __future__ import annotations

import pytest

from evalfleet.core.errors import JudgeError, JudgeRejected, JudgeUnavailable
from workers.health.readiness import CheckResult, assess_readiness, judge_result


@pytest.mark.parametrize(
    ("error", "ok", "reachable", "detail"),
    [
        (None, True, True, "models listed"),
        (JudgeRejected("no route", status_code=404), True, True, "HTTP 404"),  # no /models
        (JudgeRejected("bad", status_code=422), True, True, "HTTP 422"),
        (JudgeUnavailable("busy", status_code=429), True, True, "rate limiting"),
        # reachable, but every call would fail
        (JudgeRejected("key", status_code=401), False, True, "refuses the API key"),
        (JudgeRejected("key", status_code=403), False, True, "refuses the API key"),
        (JudgeUnavailable("down", status_code=500), False, True, "failing"),
        (JudgeUnavailable("down", status_code=503), False, True, "failing"),
        (JudgeUnavailable("cannot reach the judge: ConnectError"), False, False, "ConnectError"),
    ],
)
def test_judge_answers(error: JudgeError | None, ok: bool, reachable: bool, detail: str) -> None:
    result = judge_result(error)
    assert (result.name, result.ok, result.reachable) == ("judge", ok, reachable)
    assert detail in result.detail
    assert result.required


BROKER = CheckResult.passed("broker")
DATABASE = CheckResult.passed("database")
JUDGE = CheckResult.passed("judge", "models listed")


@pytest.mark.parametrize(
    ("checks", "draining", "ready", "reason"),
    [
        ([BROKER, DATABASE, JUDGE], False, True, "every check passed"),
        ([BROKER, DATABASE, JUDGE], True, False, "shutting down"),
        (
            [CheckResult.unreachable("broker", "refused"), DATABASE, JUDGE],
            False,
            False,
            "broker: refused",
        ),
        (
            [
                BROKER,
                CheckResult.unreachable("database", "timeout"),
                judge_result(JudgeRejected("key", status_code=401)),
            ],
            False,
            False,
            "database: timeout; judge: HTTP 401",
        ),
    ],
)
def test_readiness(checks: list[CheckResult], draining: bool, ready: bool, reason: str) -> None:
    readiness = assess_readiness(checks, draining=draining)
    assert readiness.ready is ready
    assert reason in readiness.reason
    assert readiness.checks == tuple(checks)


def test_a_failed_optional_check_degrades_without_making_the_worker_not_ready() -> None:
    endpoint = CheckResult.unreachable("judge endpoint local", "refused").optional()
    readiness = assess_readiness([BROKER, DATABASE, JUDGE, endpoint], draining=False)
    assert readiness.ready
    assert readiness.reason == "degraded (ready): judge endpoint local: refused"
    broken = assess_readiness(
        [BROKER, CheckResult.unreachable("database", "timeout"), JUDGE, endpoint], draining=False
    )
    assert not broken.ready
    assert broken.reason == "database: timeout; judge endpoint local: refused"
