"""Batch mode behind the judge provider contract: the answers a finished batch gave.

The collector downloads a batch's output and error files and loads each line's answer
here; the worker's own evaluator then runs the batch's jobs through a
:class:`~workers.judge.fleet.JudgeFleet` around this provider, so claims, parsing,
storage and idempotency are the code every synchronous verdict goes through. A request
is matched to its answer by its model and messages (the evaluator renders the job again,
exactly as the worker that spooled it did).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from evalfleet.core.errors import JudgeError, JudgeUnavailable
from workers.judge.base import JudgeClient, JudgeReply, JudgeRequest
from workers.judge.provider import JudgeProvider, ProviderCapabilities

#: What the provider answers a request no batch line answered (a re-ask, say).
NO_LINE = "no batch line answers this request"


def request_fingerprint(body: Mapping[str, Any]) -> str:
    """What matches a request to its batch line: its model and messages."""
    text = json.dumps([body.get("model"), body.get("messages")], sort_keys=True,
                      separators=(",", ":"))  # ASCII: lone surrogates are escaped
    return hashlib.sha256(text.encode()).hexdigest()


class CollectedAnswers(JudgeProvider):
    """Answers from batch lines, each given once.

    Args:
        endpoint: The Batch API's base URL (names the judge in the fleet's keys).
    """

    capabilities = ProviderCapabilities(name="batch", kind="batch")

    def __init__(self, endpoint: str) -> None:
        self._endpoint = endpoint
        self._answers: dict[str, list[JudgeReply | JudgeError]] = {}

    @property
    def endpoint(self) -> str:
        """See :attr:`JudgeProvider.endpoint`."""
        return self._endpoint

    def load(self, answers: Sequence[tuple[Mapping[str, Any], JudgeReply | JudgeError]]) -> None:
        """Hold answers to hand out, each with the request body it answers."""
        for body, answer in answers:
            self._answers.setdefault(request_fingerprint(body), []).append(answer)

    def clear(self) -> None:
        """Drop answers nobody asked for."""
        self._answers.clear()

    async def generate(self, request: JudgeRequest) -> JudgeReply:
        """The batch line's answer to ``request``.

        Raises:
            JudgeError: The line's failure, or :class:`JudgeUnavailable` when no line
                answers it.
        """
        waiting = self._answers.get(request_fingerprint(request.payload()))
        if not waiting:
            raise JudgeUnavailable(NO_LINE)
        answer = waiting.pop()
        if isinstance(answer, JudgeError):
            raise answer
        return answer


class CollectedJudge(JudgeClient):
    """The blocking face the evaluator takes, over :class:`CollectedAnswers`: every answer
    is already here, so none of the fleet's per-call concerns applies (a line's failure
    is the provider's answer, not the endpoint's health).

    Args:
        provider: The batch lines' answers.
        fallback: Sends the requests no line answers (the re-asks) to a synchronous judge;
            None answers them :data:`NO_LINE`.
    """

    def __init__(self, provider: CollectedAnswers, *,
                 fallback: JudgeClient | None = None) -> None:
        self.provider = provider
        self.fallback = fallback

    def complete_many(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply | JudgeError]:
        """See :meth:`JudgeClient.complete_many`."""
        async def answer(request: JudgeRequest) -> JudgeReply | JudgeError:
            try:
                return await self.provider.generate(request)
            except JudgeError as exc:
                return exc

        async def every() -> list[JudgeReply | JudgeError]:
            return [await answer(request) for request in requests]

        answers = asyncio.run(every())
        unanswered = [index for index, answer in enumerate(answers)
                      if isinstance(answer, JudgeUnavailable) and str(answer) == NO_LINE]
        if self.fallback is not None and unanswered:
            sent = self.fallback.complete_many([requests[index] for index in unanswered])
            for index, reply in zip(unanswered, sent, strict=True):
                answers[index] = reply
        return answers
