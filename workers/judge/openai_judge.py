"""A judge reached through the ``openai`` client: any OpenAI-compatible endpoint."""

from __future__ import annotations

import time
from typing import Any

import openai

from evalfleet.errors import JudgeRejected, JudgeUnavailable
from workers.backoff import parse_retry_after
from workers.judge.base import JudgeClient, JudgeReply, JudgeRequest

#: Sent when no API key is configured (local judges such as the simulator ignore it).
PLACEHOLDER_API_KEY = "not-needed"

#: Statuses worth retrying besides 429 and 5xx.
_TRANSIENT_STATUSES = frozenset({408, 409, 425})


class OpenAIJudge(JudgeClient):
    """Chat completions through one shared, thread-safe ``openai.OpenAI`` client."""

    def __init__(self, *, base_url: str | None, api_key: str | None, timeout_s: float) -> None:
        # max_retries=0: the worker owns the one retry layer (backoff, Retry-After).
        self._client = openai.OpenAI(
            base_url=base_url, api_key=api_key or PLACEHOLDER_API_KEY, timeout=timeout_s,
            max_retries=0,
        )

    def complete(self, request: JudgeRequest) -> JudgeReply:
        """See :meth:`JudgeClient.complete`."""
        arguments: dict[str, Any] = {
            "model": request.model, "messages": list(request.messages),
            "temperature": request.temperature, "max_tokens": request.max_tokens,
        }
        if request.response_format is not None:
            arguments["response_format"] = request.response_format
        started = time.perf_counter()
        try:
            completion = self._client.chat.completions.create(**arguments)
        except openai.OpenAIError as exc:
            raise _translate(exc) from exc
        latency_ms = round((time.perf_counter() - started) * 1000)
        if not completion.choices:
            raise JudgeUnavailable("judge reply has no choices")
        choice, usage = completion.choices[0], completion.usage
        return JudgeReply(
            text=choice.message.content, finish_reason=choice.finish_reason,
            prompt_tokens=usage.prompt_tokens if usage else None,
            completion_tokens=usage.completion_tokens if usage else None,
            latency_ms=latency_ms,
        )

    def close(self) -> None:
        """See :meth:`JudgeClient.close`."""
        self._client.close()


def _translate(exc: openai.OpenAIError) -> Exception:
    """Map an ``openai`` exception onto the project's tree, most specific first."""
    if isinstance(exc, openai.APITimeoutError):
        return JudgeUnavailable("judge call timed out")
    if isinstance(exc, openai.APIConnectionError):
        return JudgeUnavailable(f"cannot reach the judge: {exc}")
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        retry_after_s = parse_retry_after(exc.response.headers)
        if status == 429 and _error_code(exc) == "insufficient_quota":
            return JudgeRejected("judge quota exhausted (insufficient_quota)", status_code=status)
        if status == 429 or status >= 500 or status in _TRANSIENT_STATUSES:
            return JudgeUnavailable(
                f"judge answered {status}: {exc.message}", status_code=status,
                retry_after_s=retry_after_s,
            )
        return JudgeRejected(f"judge answered {status}: {exc.message}", status_code=status)
    return JudgeUnavailable(f"unreadable judge reply: {exc}")


def _error_code(exc: openai.APIStatusError) -> str | None:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            code = error.get("code") or error.get("type")
            return str(code) if code else None
    return None
