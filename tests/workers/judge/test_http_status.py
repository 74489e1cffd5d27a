"""What a judge's error status means for the job."""

from __future__ import annotations

from typing import Any

import pytest

from evalfleet.core.errors import JudgeRejected, JudgeUnavailable
from workers.judge.http_status import (
    classify_status,
    error_code,
    prompt_too_long,
    refuses_prompt_cache_key,
    refuses_response_format,
)


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


@pytest.mark.parametrize(("status", "message", "refuses"), [
    (400, "Invalid parameter: 'response_format' of type 'json_schema' is not supported with "
          "this model.", True),
    (400, "json_schema is not supported", True),
    (422, "guided_json requires outlines", True),
    (400, "This model's maximum context length is 8192 tokens", False),
    (404, "response_format: model not found", False),
    (500, "response_format failed", False),
    # llama-cpp-python: its request validation refuses json_schema with a 500.
    (500, "1 validation error for CreateChatCompletionRequest\nresponse_format.type\n  Input "
          "should be 'text' or 'json_object' [type=literal_error, input_value='json_schema']",
     True),
])
def test_refuses_response_format(status: int, message: str, refuses: bool) -> None:
    error = classify_status(status, message=message, body=None, retry_after_s=None)
    assert refuses_response_format(error) is refuses
    if refuses:  # a refusal is no server fault: never retried, never against the breaker
        assert isinstance(error, JudgeRejected)


@pytest.mark.parametrize(("status", "message", "body"), [
    (400, "This model's maximum context length is 2048 tokens. However, you requested 3000",
     {"error": {"code": "context_length_exceeded"}}),  # OpenAI, llama-cpp-python
    (400, "the request exceeds the available context size, try increasing it",
     {"error": {"code": 400, "type": "exceed_context_size_error"}}),  # llama.cpp
    (400, "This model's maximum context length is 4096 tokens.",
     {"object": "error", "type": "BadRequestError", "code": 400}),  # vLLM: text only
])
def test_a_prompt_too_long_is_named_whatever_the_server(status: int, message: str,
                                                        body: Any) -> None:
    error = classify_status(status, message=message, body=body, retry_after_s=None)
    assert isinstance(error, JudgeRejected) and prompt_too_long(error)
    assert not refuses_response_format(error)


def test_a_busy_server_mentioning_context_is_still_transient() -> None:
    error = classify_status(503, message="context length warmup", body=None, retry_after_s=1)
    assert isinstance(error, JudgeUnavailable) and not prompt_too_long(error)


def test_no_error_refuses_nothing() -> None:
    assert refuses_response_format(None) is False


@pytest.mark.parametrize(("status", "message", "body", "refuses"), [
    # Azure OpenAI, for a parameter its API version does not know.
    (400, "Unrecognized request argument supplied: prompt_cache_key", None, True),
    # OpenAI-style: the parameter named in the error's param only.
    (400, "Unknown parameter.", {"error": {"param": "prompt_cache_key"}}, True),
    (422, "extra fields not permitted: prompt_cache_key", None, True),
    # A server whose pydantic validation forbids extra fields answers 500.
    (500, "1 validation error for CreateChatCompletionRequest\nprompt_cache_key\n  Extra "
          "inputs are not permitted [type=extra_forbidden]", None, True),
    (500, "prompt_cache_key backend crashed", None, False),  # a fault, not a refusal
    (400, "Unrecognized request argument supplied: seed", None, False),
    (429, "prompt_cache_key rate limited", None, False),
])
def test_a_refused_prompt_cache_key_is_named(status: int, message: str, body: Any,
                                             refuses: bool) -> None:
    error = classify_status(status, message=message, body=body, retry_after_s=None)
    assert refuses_prompt_cache_key(error) is refuses
    assert not refuses_response_format(error)
