"""Batch judging's side of the evaluator's port (:mod:`workers.batch_port`): the worker
spools batch-mode jobs (and cascade jobs reaching a batch tier, with their earlier tiers'
answers); the collector judges them from batch lines and spools a re-ask, or a later
batch tier's request, no line answered for a later batch (or lets the synchronous judge
ask a re-ask)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from evalfleet.core.errors import JudgeError
from evalfleet.core.message import encode_job
from evalfleet.store import Claim
from evalfleet.store.queries.batchspool import BatchSpool, SpoolEntry
from workers.batch_port import BatchPort, BatchRequest
from workers.batchjudge.provider import NoBatchLine, with_first_reply, with_tier_answers
from workers.judge.base import JudgeClient, JudgeReply, JudgeRequest
from workers.judge.formats import FormatSupport, shaped
from workers.outcome import Outcome

#: A claim held longer than this (in seconds) is a batch's (it holds its keys with no
#: expiry: evalfleet.store.queries.batchspool): a copy of its job is a duplicate.
BATCH_HELD_S = 365 * 86_400.0


class _BatchHeld(BatchPort):
    def holds(self, claim: Claim) -> bool:
        """See :meth:`BatchPort.holds`."""
        return claim.retry_in_s >= BATCH_HELD_S


class SpoolingMode(_BatchHeld):
    """The worker's side: batch-mode jobs go to the spool, the worker acknowledges them.

    Args:
        spool: The spool.
        formats: The response formats the worker's fleet learnt (a batch line's refusal
            lowers them in the collector's fleet); each line is sent in the strongest its
            model accepts, as a call would be. None: as the metric asks.
    """

    def __init__(self, spool: BatchSpool, *, formats: FormatSupport | None = None) -> None:
        self.batch_spool = spool
        self.formats = formats

    def spool(self, requests: Sequence[BatchRequest], *, owner: str, now: datetime) -> bool:
        """See :meth:`BatchPort.spool`."""
        # A batch file holds one model: the line's (a cascade tier's, not its identity).
        self.batch_spool.put([SpoolEntry(item.key.digest(), item.request.model, item.metric.name,
                                         with_tier_answers(encode_job(item.job), item.carried),
                                         self._line(item.request))
                              for item in requests], owner=owner, now=now)
        return True

    def _line(self, request: JudgeRequest) -> dict[str, Any]:
        """A batch line's body: the request in the format its model accepts."""
        fitted = (shaped(request.response_format, self.formats.mode_for(request.model))
                  if self.formats is not None else request.response_format)
        # Batch lines carry no prompt_cache_key: a Batch API that refused it would fail
        # every line, with no call of the fleet's to drop it and send again.
        return replace(request, prompt_cache_key=None, response_format=fitted).payload()


class CollectingMode(_BatchHeld):
    """The collector's side: verdicts priced at the batch share; an unusable reply's
    re-ask waits for a later batch (``reask_in_batch``), or goes to ``reask_judge``.

    Args:
        reask_in_batch: Spool a re-ask no line answers, its claim still held.
        reask_judge: The synchronous judge re-asks go to (None: the batch lines).
    """

    judge_mode = "batch"

    def __init__(self, *, reask_in_batch: bool, reask_judge: JudgeClient | None = None) -> None:
        self.reask_in_batch = reask_in_batch
        self.reask_judge = reask_judge

    def unanswered(self, reask: BatchRequest, *, first: JudgeReply,
                   asked: int) -> Outcome | None:
        """See :meth:`BatchPort.unanswered`: the re-ask as a later batch's line, under
        the same key and job, carrying the first reply (served again when the later
        batch is collected)."""
        if not self.reask_in_batch:
            return None
        job = with_tier_answers(with_first_reply(encode_job(reask.job), first, asked=asked),
                                reask.carried)
        return Outcome.spooled(SpoolEntry(reask.key.digest(), reask.request.model,
                                          reask.metric.name, job, reask.request.payload()))

    def unanswered_tier(self, request: BatchRequest,
                        answer: JudgeError) -> Outcome | None:
        """See :meth:`BatchPort.unanswered_tier`: a cascade reaching a batch tier no line
        of this batch answers (it was not yet asked) waits for a later batch, its claim
        still held, carrying the tiers' answers so far."""
        if not isinstance(answer, NoBatchLine):
            return None
        job = with_tier_answers(encode_job(request.job), request.carried)
        line = replace(request.request, prompt_cache_key=None).payload()
        return Outcome.spooled(SpoolEntry(request.key.digest(), request.request.model,
                                          request.metric.name, job, line))
