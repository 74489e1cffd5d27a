"""What an HTTP error status from a judge means for the job. Pure.

One mapping for every judge provider: 429, 5xx and a few transient statuses are
worth retrying; an exhausted quota, bad requests, auth failures and unknown
models are not. Two refusals are named, since the worker acts on them
differently from other rejections, and servers say them differently:

- a prompt longer than the model's context (:data:`CONTEXT_LENGTH_EXCEEDED`): OpenAI
  and llama-cpp-python send ``code: context_length_exceeded`` (400), llama.cpp's
  server ``type: exceed_context_size_error``, vLLM a 400 with text only. It becomes a
  ``failed`` verdict naming it, never a retry.
- a refused ``response_format`` (:data:`RESPONSE_FORMAT_REFUSED`): a 400 or 422 that
  names the argument, or llama-cpp-python's 500, whose request validation names
  ``response_format.type``. The fleet steps the format down; it is no server fault and
  never counts against the endpoint's circuit breaker.
- a refused ``prompt_cache_key`` (:data:`PROMPT_CACHE_KEY_REFUSED`): a 400 or 422 that
  names the parameter (Azure OpenAI: "Unrecognized request argument supplied"), or a 500
  whose request validation names it. The fleet drops the parameter for that endpoint and
  model and sends the call again.
"""

from __future__ import annotations

from typing import Any

from evalfleet.core.errors import QUOTA_CODES, JudgeError, JudgeRejected, JudgeUnavailable

#: Statuses worth retrying besides 429 and 5xx.
TRANSIENT_STATUSES = frozenset({408, 409, 425})

#: The code of a rejection for a prompt longer than the model's context.
CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"

#: The code of a rejection of the request's ``response_format`` (not of the request).
RESPONSE_FORMAT_REFUSED = "response_format_refused"

#: The code of a rejection of the request's ``prompt_cache_key`` (not of the request).
PROMPT_CACHE_KEY_REFUSED = "prompt_cache_key_refused"

#: Error codes and types servers give a prompt longer than the context.
_CONTEXT_CODES = frozenset({CONTEXT_LENGTH_EXCEEDED, "exceed_context_size_error"})

#: Words of an error message that say the prompt is longer than the context (vLLM sends
#: text only: "This model's maximum context length is 2048 tokens...").
_CONTEXT_WORDS = ("maximum context length", "context length", "context size",
                  "context window", "prompt is too long")

#: Words of a 500 that make it a refusal of the request rather than a server fault:
#: llama-cpp-python's request validation ("1 validation error for
#: CreateChatCompletionRequest / response_format.type / Input should be ...").
_VALIDATION_WORDS = ("validation error", "input should be", "not supported", "unsupported")

#: Words of an error message that tie it to the ``response_format`` argument.
_FORMAT_WORDS = ("response_format", "json_schema", "json_object", "structured output",
                 "guided_json", "guided decoding")


def classify_status(
    status: int, *, message: str, body: Any, retry_after_s: float | None,
) -> JudgeError:
    """The error a judge's non-2xx answer becomes.

    Args:
        status: The HTTP status.
        message: A short description for logs and dead letters.
        body: The decoded error body, if any (OpenAI's ``{"error": {"code": ...}}``).
        retry_after_s: The delay the judge asked for, if any.
    """
    code = error_code(body)
    if code in QUOTA_CODES:
        return JudgeRejected(f"judge quota exhausted ({code})", status_code=status, code=code)
    text = message.lower()
    if status != 429 and status < 500 and (
            code in _CONTEXT_CODES or error_type(body) in _CONTEXT_CODES
            or any(word in text for word in _CONTEXT_WORDS)):
        return JudgeRejected(f"the prompt is longer than the judge's context: {message}",
                             status_code=status, code=CONTEXT_LENGTH_EXCEEDED)
    if _names_parameter(status, f"{text} {_error_param(body) or ''}".lower(),
                        words=("prompt_cache_key",)):
        return JudgeRejected(f"judge refuses the prompt_cache_key ({status}): {message}",
                             status_code=status, code=PROMPT_CACHE_KEY_REFUSED)
    if _names_parameter(status, f"{text} {code or ''}".lower(), words=_FORMAT_WORDS):
        return JudgeRejected(f"judge refuses the response_format ({status}): {message}",
                             status_code=status, code=RESPONSE_FORMAT_REFUSED)
    if status == 429 or status >= 500 or status in TRANSIENT_STATUSES:
        return JudgeUnavailable(f"judge answered {status}: {message}", status_code=status,
                                retry_after_s=retry_after_s)
    return JudgeRejected(f"judge answered {status}: {message}", status_code=status, code=code)


def _names_parameter(status: int, text: str, *, words: tuple[str, ...]) -> bool:
    """A 400 or 422 naming a request parameter (by one of ``words``, the first being its
    name), or a 500 whose request validation names it."""
    if status in (400, 422):
        return any(word in text for word in words)
    return (status == 500 and words[0] in text
            and any(word in text for word in _VALIDATION_WORDS))


def refuses_response_format(answer: object) -> bool:
    """Whether a call ended with the judge refusing its ``response_format`` (not the
    request itself).

    Args:
        answer: What a judge call ended with.

    Returns:
        True for a rejection classified :data:`RESPONSE_FORMAT_REFUSED`.
    """
    return isinstance(answer, JudgeRejected) and answer.code == RESPONSE_FORMAT_REFUSED


def refuses_prompt_cache_key(answer: object) -> bool:
    """Whether a call ended with the judge refusing its ``prompt_cache_key`` parameter.

    Args:
        answer: What a judge call ended with.

    Returns:
        True for a rejection classified :data:`PROMPT_CACHE_KEY_REFUSED`.
    """
    return isinstance(answer, JudgeRejected) and answer.code == PROMPT_CACHE_KEY_REFUSED


def prompt_too_long(answer: object) -> bool:
    """Whether a call ended with the judge refusing a prompt longer than its context.

    Args:
        answer: What a judge call ended with.

    Returns:
        True for a rejection classified :data:`CONTEXT_LENGTH_EXCEEDED`.
    """
    return isinstance(answer, JudgeRejected) and answer.code == CONTEXT_LENGTH_EXCEEDED


def error_code(body: Any) -> str | None:
    """The ``code`` (or, when it has no text code, ``type``) of an OpenAI-style error body."""
    error = _error_object(body)
    if error is None:
        return None
    code = error.get("code")
    if isinstance(code, str) and code:
        return code
    kind = error.get("type")
    return str(kind) if kind else None


def _error_param(body: Any) -> str | None:
    """The ``param`` of an OpenAI-style error body (the request parameter it is about)."""
    error = _error_object(body)
    param = error.get("param") if error is not None else None
    return param if isinstance(param, str) else None


def error_type(body: Any) -> str | None:
    """The ``type`` of an OpenAI-style error body (llama.cpp names its errors there)."""
    error = _error_object(body)
    kind = error.get("type") if error is not None else None
    return kind if isinstance(kind, str) else None


def _error_object(body: Any) -> dict[str, Any] | None:
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            return error
    return None
