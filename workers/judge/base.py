"""What the worker sends and gets back: judge requests, replies, and the blocking face
task threads use (:class:`JudgeClient`, implemented by
:class:`~workers.judge.fleet.JudgeFleet` around any
:class:`~workers.judge.provider.JudgeProvider`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from evalfleet.core.errors import JudgeError
from workers.judge.logprobs import TokenLogprob
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
    endpoint: str | None = None
    """The named judge endpoint it goes to (``EVALFLEET_JUDGE_ENDPOINTS``, a cascade
    tier's ``endpoint``); None: the fleet's judge. Not sent."""
    prompt_cache_key: str | None = None
    """Sent as ``prompt_cache_key`` (:func:`prompt_cache_key`), or None to send none: the
    fleet drops it for an endpoint and model that refuse it."""
    top_logprobs: int | None = None
    """Ask for the reply's log-probabilities (``logprobs: true``) with this many
    alternatives per token (``top_logprobs``, 0 to 20), for a cascade tier's confidence;
    None asks for none."""

    def payload(self) -> dict[str, Any]:
        """The JSON body of ``POST /chat/completions``."""
        body: dict[str, Any] = {
            "model": self.model, "messages": list(self.messages),
            "temperature": self.temperature, "max_tokens": self.max_tokens,
        }
        if self.response_format is not None:
            body["response_format"] = self.response_format
        if self.prompt_cache_key is not None:
            body["prompt_cache_key"] = self.prompt_cache_key
        if self.top_logprobs is not None:
            body["logprobs"] = True
            body["top_logprobs"] = self.top_logprobs
        return body


def prompt_cache_key(metric: str, prompt_version: str) -> str:
    """The ``prompt_cache_key`` of a metric's calls: one per metric and prompt version, the
    calls whose messages share their fixed text (a provider routes calls with one key to
    the same cache).

    Args:
        metric: The metric's name.
        prompt_version: Its prompt version.

    Returns:
        ``evalfleet:<metric>:<prompt version>``.
    """
    return f"evalfleet:{metric}:{prompt_version}"


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
    cached_tokens: int | None = None
    """Prompt tokens served from the provider's prompt cache
    (``usage.prompt_tokens_details.cached_tokens``), when it reports them."""
    logprobs: tuple[TokenLogprob, ...] | None = None
    """The reply's token log-probabilities (``choices[0].logprobs.content``), when asked
    for and returned well-formed (:func:`workers.judge.logprobs.read_logprobs`)."""


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
    """Sends chat completions to a judge, from any thread."""

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
