"""The evaluator's one port to batch judging (docs/batch.md).

The evaluator decides which jobs are batch-mode (``EvaluatorOptions.in_batch_mode``) and
asks this port everything else: whether a busy claim is a batch's, to spool the
batch-mode jobs a worker took (and a cascade's jobs when they reach a batch tier), where
a collected job's re-ask goes, what becomes of a re-ask or a batch tier's request no
batch line answered, and what its verdicts record as their ``judge_mode``.
The implementations live with batch judging (:mod:`workers.batchjudge.mode`): the
worker's side spools, the collector's side judges from batch lines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from evalfleet.core.errors import JudgeError
from evalfleet.core.message import Job
from evalfleet.core.metric import Metric
from evalfleet.store import Claim, VerdictKey
from workers.judge.base import JudgeClient, JudgeReply, JudgeRequest
from workers.outcome import Outcome

#: One cascade tier's answer: the model asked and what it answered.
Exchange = tuple[str, JudgeReply | JudgeError]


@dataclass(frozen=True)
class BatchRequest:
    """A claimed job's judge request, as batch judging takes it."""

    key: VerdictKey
    metric: Metric
    job: Job
    request: JudgeRequest
    """The line's request (a cascade's: its batch tier's, with that tier's model)."""
    carried: tuple[Exchange, ...] = ()
    """A cascade's answers so far, served again to their tiers when the batch is
    collected (the cascade runs again from its first tier)."""


class BatchPort:
    """What the evaluator asks of batch judging; each hook's default is "no batch"."""

    judge_mode: str = "call"
    """What the verdicts of this evaluator record as their ``judge_mode`` (``batch``
    prices them at the batch share)."""
    reask_judge: JudgeClient | None = None
    """Where re-asks go instead of the evaluator's judge (None: its judge)."""

    def holds(self, claim: Claim) -> bool:
        """Whether a busy claim is a batch's (it gives the verdict, or sends the job back
        itself: waiting for it would loop for hours)."""
        return False

    def spool(self, requests: Sequence[BatchRequest], *, owner: str, now: datetime) -> bool:
        """Spool batch-mode jobs whose keys ``owner`` holds (their claims pass to the
        batch); False when this side judges them instead.

        Raises:
            StoreUnavailable: The database cannot be reached (nothing was spooled).
        """
        return False

    def unanswered_tier(self, request: BatchRequest,
                        answer: JudgeError) -> Outcome | None:
        """The outcome of a cascade's batch-tier request that ``answer`` (no batch line)
        met, or None to take ``answer`` as the tier's (it escalates).

        Args:
            request: The tier's request, with the cascade's answers so far.
            answer: What the judge answered it.
        """
        return None

    def unanswered(self, reask: BatchRequest, *, first: JudgeReply,
                   asked: int) -> Outcome | None:
        """The outcome of a re-ask no answer was given for (no batch line), or None to
        conclude it as a deferred call.

        Args:
            reask: The re-ask.
            first: The unusable first reply it follows.
            asked: How many messages the first request had.
        """
        return None
