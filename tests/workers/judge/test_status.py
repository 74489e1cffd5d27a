"""What a judge's error status means for the job."""

from __future__ import annotations

from typing import Any

import pytest

from evalfleet.errors import JudgeRejected, JudgeUnavailable
from workers.judge.status import classify_status, error_code


@pytest.mark.parametrize(("status", "body", "kind", "access"), [
    (429, {"error": {"code": "rate_limit_exceeded"}}, JudgeUnavailable, False),
    (429, {"error": {"code": "insufficient_quota"}}, JudgeRejected, True),
    (500, None, JudgeUnavailable, False),
    (503, {"error": {"message": "overloaded"}}, JudgeUnavailable, False),
    (408, None, JudgeUnavailable, False),
    (400, {"error": {"code": "invalid_request_error"}}, JudgeRejected, False),
    (401, {"error": {"code": "invalid_api_key"}}, JudgeRejected, True),
    (403, None, JudgeRejected, True),
    (404, {"error": {"type": "model_not_found"}}, JudgeRejected, False),
    (422, None, JudgeRejected, False),
])
def test_classify_status(status: int, body: Any, kind: type, access: bool) -> None:
    error = classify_status(status, message="m", body=body, retry_after_s=2.0)
    assert isinstance(error, kind)
    assert error.status_code == status
    if isinstance(error, JudgeUnavailable):
        assert error.retry_after_s == 2.0
    else:
        assert isinstance(error, JudgeRejected) and error.is_access_problem is access


@pytest.mark.parametrize(("body", "code"), [
    ({"error": {"code": "x", "type": "y"}}, "x"),
    ({"error": {"type": "y"}}, "y"),
    ({"code": "z"}, "z"),
    ({"error": "text"}, None),
    ("text", None),
    (None, None),
])
def test_error_code(body: Any, code: str | None) -> None:
    assert error_code(body) == code
