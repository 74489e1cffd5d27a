"""The judge client contract: chat completions in, replies (or judge errors) out.

Implementations translate their library's exceptions into
:class:`~evalfleet.core.errors.JudgeUnavailable` (retry later) and
:class:`~evalfleet.core.errors.JudgeRejected` (retrying will not help) at exactly
one place, and never retry on their own: retries belong to the worker.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from evalfleet.core.errors import JudgeError
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
    metric: str = ""
    """The metric it judges (for telemetry; not sent)."""

    def payload(self) -> dict[str, Any]:
        """The JSON body of ``POST /chat/completions``."""
        body: dict[str, Any] = {
            "model": self.model, "messages": list(self.messages),
            "temperature": self.temperature, "max_tokens": self.max_tokens,
        }
        if self.response_format is not None:
            body["response_format"] = self.response_format
        return body


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
    model: str | None = None
    """The model the judge says answered (the response's ``model``), when it says."""
    system_fingerprint: str | None = None
    """The backend configuration the judge reports (``system_fingerprint``), when it does."""


#: Longest judge-reported model name or fingerprint kept, in characters.
MAX_IDENTITY = 128


def reported(value: object) -> str | None:
    """A judge-reported identity value as kept: text cut at :data:`MAX_IDENTITY`, else None.

    Args:
        value: The response's ``model`` or ``system_fingerprint``, as decoded.

    Returns:
        The text, shortened, or None when the judge sent none (or not a string).
    """
    return value[:MAX_IDENTITY] if isinstance(value, str) and value else None


#: One answer of :meth:`JudgeClient.answers`: the request's index and its reply or error.
Answered = tuple[int, JudgeReply | JudgeError]


class JudgeClient(ABC):
    """Sends chat completions to a judge."""

    @abstractmethod
    def complete_many(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply | JudgeError]:
        """Send the requests (concurrently where the client can) and wait for all.

        Returns:
            One entry per request, in order: the reply, or the
            :class:`~evalfleet.core.errors.JudgeError` that request ended with
            (``JudgeUnavailable`` carries Retry-After).
        """

    def answers(self, requests: Sequence[JudgeRequest], *,
                gather_s: float = 0.0) -> Iterator[list[Answered]]:
        """Send the requests and yield their answers as they arrive.

        Each item holds every answer that arrived since the previous item was taken (at
        least one), so a caller that stores each item in one statement stores answers
        that arrive together together. A client that cannot tell answers apart before
        all are in (this default) yields them all at once.

        Args:
            requests: The calls to make.
            gather_s: After an answer arrives, how long to wait for more to hand over
                with it (clients that make one call at a time do not wait).

        Yields:
            ``(index, answer)`` pairs: the request's position in ``requests`` and what
            :meth:`complete_many` would have returned for it.
        """
        if requests:
            yield list(enumerate(self.complete_many(requests)))

    def close(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Release connections."""


class OneAtATimeJudge(JudgeClient):
    """A judge client that makes one call at a time, on the calling thread (the
    ``openai`` client and its pacing gate): each answer is handed over as soon as it is
    in, with nothing to gather."""

    @abstractmethod
    def complete_one(self, request: JudgeRequest) -> JudgeReply | JudgeError:
        """Send one request and wait for its answer: the reply, or the judge error."""

    def complete_many(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply | JudgeError]:
        """See :meth:`JudgeClient.complete_many`: one request after the other."""
        return [self.complete_one(request) for request in requests]

    def answers(self, requests: Sequence[JudgeRequest], *,
                gather_s: float = 0.0) -> Iterator[list[Answered]]:
        """See :meth:`JudgeClient.answers`: each answer as soon as it is in."""
        for index, request in enumerate(requests):
            yield [(index, self.complete_one(request))]
