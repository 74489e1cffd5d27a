"""The judge client contract: one chat completion in, one reply out.

Implementations translate their library's exceptions into
:class:`~evalfleet.errors.JudgeUnavailable` (retry later) and
:class:`~evalfleet.errors.JudgeRejected` (retrying will not help) at exactly
one place, and never retry on their own: retries belong to the worker.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from workers.renderer import ChatMessage


@dataclass(frozen=True)
class JudgeRequest:
    """One chat completion to send."""

    messages: Sequence[ChatMessage]
    model: str
    temperature: float
    max_tokens: int
    response_format: dict[str, Any] | None = None
    """The OpenAI ``response_format`` argument, or None for plain text."""


@dataclass(frozen=True)
class JudgeReply:
    """What the judge answered."""

    text: str | None
    """The reply content (None when the judge sent none)."""

    finish_reason: str | None
    """``stop``, ``length`` (cut off: never repaired), ..."""

    prompt_tokens: int | None
    completion_tokens: int | None
    latency_ms: int
    """Wall time of the call."""


class JudgeClient(ABC):
    """Sends chat completions to a judge."""

    @abstractmethod
    def complete(self, request: JudgeRequest) -> JudgeReply:
        """Send one request.

        Raises:
            JudgeUnavailable: Transport error, timeout, 429 or 5xx; carries Retry-After.
            JudgeRejected: 400, 401, 403, 404, 422 or an exhausted quota.
        """

    def close(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Release connections."""
