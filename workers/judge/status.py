"""What an HTTP error status from a judge means for the job. Pure.

One mapping for every judge client: 429, 5xx and a few transient statuses are
worth retrying; an exhausted quota, bad requests, auth failures and unknown
models are not.
"""

from __future__ import annotations

from typing import Any

from evalfleet.core.errors import QUOTA_CODES, JudgeError, JudgeRejected, JudgeUnavailable

#: Statuses worth retrying besides 429 and 5xx.
TRANSIENT_STATUSES = frozenset({408, 409, 425})


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
    if status == 429 or status >= 500 or status in TRANSIENT_STATUSES:
        return JudgeUnavailable(f"judge answered {status}: {message}", status_code=status,
                                retry_after_s=retry_after_s)
    return JudgeRejected(f"judge answered {status}: {message}", status_code=status, code=code)


#: Words in a 400's message that tie it to the ``response_format`` argument.
_FORMAT_WORDS = ("response_format", "json_schema", "json_object", "structured output",
                 "guided_json", "guided decoding")


def refuses_response_format(error: JudgeError | None) -> bool:
    """Whether the judge refused the request's ``response_format`` (not the request itself).

    A server without structured outputs answers 400 (or 422) and names the argument;
    any other 400 (a prompt too long, an unknown parameter) is a real rejection.

    Args:
        error: What a judge call ended with.

    Returns:
        True for a 400 or 422 rejection whose message or code names the response format.
    """
    if not isinstance(error, JudgeRejected) or error.status_code not in (400, 422):
        return False
    text = f"{error} {error.code or ''}".lower()
    return any(word in text for word in _FORMAT_WORDS)


def error_code(body: Any) -> str | None:
    """The ``code`` (or ``type``) of an OpenAI-style error body, if any."""
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            code = error.get("code") or error.get("type")
            return str(code) if code else None
    return None
