"""Batch mode behind the judge provider contract: the answers a finished batch gave.

The collector downloads a batch's output and error files and loads each line's answer
here; the worker's own evaluator then runs the batch's jobs through a
:class:`~workers.judge.fleet.JudgeFleet` around this provider, so claims, parsing,
storage and idempotency are the code every synchronous verdict goes through. A request
is matched to its answer by its model and messages (the evaluator renders the job again,
exactly as the worker that spooled it did).

A re-ask waiting for a later batch is spooled with its first reply (:data:`REASK_FIELD`
in the spooled job): the collector serves that reply again to the first request, and
the later batch's line to the re-ask, so the evaluator runs the job as a synchronous
worker would, re-asking at most once.

A cascade's job spooled for a batch tier carries the answers its earlier tiers gave
(:data:`TIERS_FIELD`): the collector serves them again to those tiers' requests, so the
evaluator runs the cascade from its first tier as the worker did, reads the batch tier's
confidence from its line, and settles the job or escalates it (docs/batch.md).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from evalfleet.core.errors import JudgeDeferred, JudgeError, JudgeRejected, JudgeUnavailable
from workers.batch_port import Exchange
from workers.judge.base import JudgeReply, JudgeRequest
from workers.judge.formats import mode_of
from workers.judge.http_status import refuses_response_format
from workers.judge.logprobs import TokenLogprob, read_logprobs
from workers.judge.provider import JudgeProvider, ProviderCapabilities

#: What the provider answers a request no batch line answered (a re-ask, say).
NO_LINE = "no batch line answers this request"

#: The key of a spooled job that carries a re-ask's first reply.
REASK_FIELD = "batch_reask"

#: The key of a spooled cascade job that carries its earlier tiers' answers.
TIERS_FIELD = "batch_tiers"

#: The lowest log-probability carried (JSON has no -Infinity; e**-10000 is 0 all the same).
_LOWEST_LOGPROB = -10_000.0



class NoBatchLine(JudgeDeferred):
    """No batch line answers the request: it was never sent, so it is no attempt (a
    re-ask then waits for a later batch, or goes to the synchronous judge)."""

    def __init__(self) -> None:
        super().__init__(NO_LINE, retry_after_s=0.0)


def with_first_reply(job: Mapping[str, Any], reply: JudgeReply, *,
                     asked: int) -> dict[str, Any]:
    """A spooled job that carries its re-ask's first reply.

    Args:
        job: The job as encoded (``encode_job``).
        reply: The first reply, whose parse failure the re-ask carries.
        asked: How many messages the first request had.
    """
    return {**job, REASK_FIELD: {"asked": asked, "reply": dataclasses.asdict(reply)}}


def first_exchange(job: Mapping[str, Any], body: Mapping[str, Any],
                   ) -> tuple[dict[str, Any], JudgeReply] | None:
    """The first request and its reply, for a spooled re-ask whose request is ``body``;
    None for a job spooled for its first ask (or a carried reply that cannot be read:
    the first request then finds no line and its job goes back to the queue)."""
    carried = job.get(REASK_FIELD)
    if not isinstance(carried, dict) or not isinstance(body.get("messages"), list):
        return None
    asked, fields = carried.get("asked"), carried.get("reply")
    if not isinstance(asked, int) or not isinstance(fields, dict):
        return None
    try:
        reply = JudgeReply(**fields)
    except TypeError:
        return None
    return {**body, "messages": body["messages"][:asked]}, reply


def with_tier_answers(job: Mapping[str, Any],
                      exchanges: Sequence[Exchange]) -> dict[str, Any]:
    """A spooled cascade job that carries its earlier tiers' answers (none: as it is).

    Args:
        job: The job as encoded (``encode_job``).
        exchanges: Each earlier tier's call and answer, in the order they were asked.
    """
    if not exchanges:
        return dict(job)
    return {**job, TIERS_FIELD: [_exchange(model, answer) for model, answer in exchanges]}


def _exchange(model: str, answer: JudgeReply | JudgeError) -> dict[str, Any]:
    if isinstance(answer, JudgeError):  # a failed tier escalated: its failure is kept
        return {"model": model, "error": str(answer),
                "rejected": isinstance(answer, JudgeRejected)}
    fields = {**dataclasses.asdict(answer), "logprobs": None}
    if answer.logprobs is not None:
        fields["logprobs"] = {"content": [_position(token) for token in answer.logprobs]}
    return {"model": model, "reply": fields}


def _position(token: TokenLogprob) -> dict[str, Any]:
    """A token's log-probabilities as a chat completion writes them."""
    return {"token": token.token, "logprob": max(token.logprob, _LOWEST_LOGPROB),
            "top_logprobs": [{"token": text, "logprob": max(value, _LOWEST_LOGPROB)}
                             for text, value in token.alternatives]}


def tier_exchanges(job: Mapping[str, Any], body: Mapping[str, Any],
                   ) -> list[tuple[dict[str, Any], JudgeReply | JudgeError]]:
    """The earlier tiers' requests and answers a spooled cascade job carries, for a job
    whose line's request is ``body`` (their messages are its first request's: a re-ask's
    line carries more). An entry that cannot be read is left out: its tier's request then
    finds no answer, as a tier never asked."""
    carried = job.get(TIERS_FIELD)
    messages = body.get("messages")
    if not isinstance(carried, list) or not isinstance(messages, list):
        return []
    reask = job.get(REASK_FIELD)
    asked = reask.get("asked") if isinstance(reask, dict) else None
    first = messages[:asked] if isinstance(asked, int) else messages
    found: list[tuple[dict[str, Any], JudgeReply | JudgeError]] = []
    for entry in carried:
        answer = _answer(entry) if isinstance(entry, dict) else None
        if answer is not None:
            found.append(({**body, "model": entry["model"], "messages": first}, answer))
    return found


def _answer(entry: dict[str, Any]) -> JudgeReply | JudgeError | None:
    if not isinstance(entry.get("model"), str):
        return None
    if isinstance(entry.get("error"), str):
        error = str(entry["error"])
        return JudgeRejected(error) if entry.get("rejected") is True else JudgeUnavailable(error)
    fields = entry.get("reply")
    if not isinstance(fields, dict):
        return None
    try:
        return JudgeReply(**{**fields, "logprobs": read_logprobs(fields.get("logprobs"))})
    except TypeError:
        return None


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
        self._answers: dict[str, list[tuple[Mapping[str, Any], JudgeReply | JudgeError]]] = {}

    @property
    def endpoint(self) -> str:
        """See :attr:`JudgeProvider.endpoint`."""
        return self._endpoint

    def load(self, answers: Sequence[tuple[Mapping[str, Any], JudgeReply | JudgeError]]) -> None:
        """Hold answers to hand out, each with the request body it answers."""
        for body, answer in answers:
            self._answers.setdefault(request_fingerprint(body), []).append((body, answer))

    def clear(self) -> None:
        """Drop answers nobody asked for."""
        self._answers.clear()

    async def generate(self, request: JudgeRequest) -> JudgeReply:
        """The batch line's answer to ``request``.

        Raises:
            JudgeError: The line's failure, or :class:`NoBatchLine` when no line
                answers it.
        """
        waiting = self._answers.get(request_fingerprint(request.payload()))
        if not waiting:
            raise NoBatchLine()
        body, answer = waiting.pop()
        if (refuses_response_format(answer)
                and mode_of(body.get("response_format")) != mode_of(request.response_format)):
            # The line refused a format this request no longer asks (the fleet stepped down
            # since it was sent): no line answers the request in its own format.
            raise NoBatchLine()
        if isinstance(answer, JudgeError):
            raise answer
        return answer
