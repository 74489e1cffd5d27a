"""The collector's judge for a cascade's tiers: batch lines first, the synchronous judge
for a call tier.

A cascade job collected from a batch runs again from its first tier
(:mod:`workers.batchjudge.provider`): the answers its earlier tiers gave are served from
what the job carries, its batch tier's from the batch line. A call tier with no answer
carried (the batch tier did not settle the job, and the next tier is asked while the
worker would wait) goes to the worker's synchronous judge; a batch tier with none waits
for a later batch (``CollectingMode.unanswered_tier``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from evalfleet.core.errors import JudgeError, UnknownMetric
from evalfleet.core.metric import MetricRegistry
from workers.batchjudge.provider import NoBatchLine
from workers.judge.base import JudgeClient, JudgeReply, JudgeRequest


class TierRouter(JudgeClient):
    """Asks the batch lines, then the synchronous judge for what they leave of a
    cascade's call tiers.

    Args:
        lines: The judge answering from batch lines (and carried answers).
        calls: The worker's synchronous judge.
        registry: The metrics, for each cascade tier's mode.
    """

    def __init__(self, lines: JudgeClient, calls: JudgeClient,
                 registry: MetricRegistry) -> None:
        self.lines = lines
        self.calls = calls
        self.registry = registry

    def complete_many(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply | JudgeError]:
        """See :meth:`JudgeClient.complete_many`."""
        # The lines know no named endpoint: a carried answer is found by model and messages.
        answers = self.lines.complete_many([replace(request, endpoint=None)
                                            for request in requests])
        asked = [index for index, answer in enumerate(answers)
                 if isinstance(answer, NoBatchLine) and self.call_tier(requests[index])]
        if asked:
            called = self.calls.complete_many([requests[index] for index in asked])
            for index, answer in zip(asked, called, strict=True):
                answers[index] = answer
        return answers

    def call_tier(self, request: JudgeRequest) -> bool:
        """Whether ``request`` is a cascade's call tier's (or its re-ask)."""
        try:
            metric = self.registry.get(request.metric)
        except UnknownMetric:
            return False
        return any(tier.check is None and tier.model == request.model and tier.mode == "call"
                   for tier in metric.spec.judge.cascade)
