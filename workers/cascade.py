"""A judge cascade for one job: ask the cheapest tier, escalate until one is sure enough.

Pure logic, driven by the edge. :func:`cascade_flow` is a generator: it yields the
request for the next tier and is sent that tier's answer (a reply or a judge error);
it returns the :class:`CascadeResult`. :func:`run_cascades` drives many flows at once
through one :class:`~workers.judge.base.JudgeClient`, a round per tier, so a delivery's
jobs escalate together within the same delivery.

Rules, in order, per tier:

- The tier is asked with log-probabilities (``top_logprobs``) and its reply parsed.
- A tier whose call failed, whose reply is no verdict, or whose verdict is a
  judge-declared failure escalates: a cheap judge's trouble is never the job's fate.
- A verdict whose confidence (:mod:`workers.verdicts.confidence`) reaches the tier's
  threshold settles the job (:func:`evalfleet.core.cascade.settles`); an unknown
  confidence or a tier with no threshold (too few labels) escalates.
- The last tier's answer is kept whatever its confidence, marked ``low_confidence`` when
  below its own threshold; its failure is the job's, handled as any judge failure.

No numpy here: thresholds come in as plain numbers, fitted elsewhere.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, replace

from evalfleet.core.cascade import settles
from evalfleet.core.errors import JudgeError
from evalfleet.core.metric import Metric
from evalfleet.core.sample import Sample
from workers.judge.base import JudgeClient, JudgeReply, JudgeRequest
from workers.verdicts import ParseFailure, Verdict, parse_verdict
from workers.verdicts.confidence import logprob_confidences, verdict_confidence

#: Alternatives asked per token when a tier states none.
DEFAULT_TOP_LOGPROBS = 5


@dataclass(frozen=True, slots=True)
class Tier:
    """One judge of a cascade, as the worker runs it."""

    model: str
    """The judge model asked."""
    threshold: float | None
    """Lowest confidence accepted (fitted on labels); None settles nothing."""
    top_logprobs: int = DEFAULT_TOP_LOGPROBS
    """Alternatives asked per token."""


@dataclass(frozen=True, slots=True)
class TierAnswer:
    """What one tier answered for the job."""

    tier: int
    """1 for the cheapest."""
    model: str
    answer: JudgeReply | JudgeError
    result: Verdict | ParseFailure | None
    """The parsed reply; None when the call failed."""
    confidence: float | None


@dataclass(frozen=True, slots=True)
class CascadeResult:
    """How the job was settled: the kept tier's answer and every tier tried."""

    tried: tuple[TierAnswer, ...]
    """Every tier asked, in order; the last one is kept."""
    low_confidence: bool
    """The kept verdict is the last tier's, below its threshold: outside the guarantee."""

    @property
    def kept(self) -> TierAnswer:
        """The answer stored."""
        return self.tried[-1]

    @property
    def settled_tier(self) -> int:
        """The tier whose answer is stored (1 for the cheapest)."""
        return self.kept.tier


def cascade_flow(request: JudgeRequest, tiers: Sequence[Tier], *, metric: Metric,
                 sample: Sample) -> Generator[JudgeRequest, JudgeReply | JudgeError,
                                              CascadeResult]:
    """Ask the tiers in turn until one settles the job.

    Args:
        request: The rendered request (its model is replaced by each tier's).
        tiers: Cheapest first; at least one.
        metric: The metric judged.
        sample: The judged sample.

    Yields:
        The next tier's request; send back its answer.

    Returns:
        The result.

    Raises:
        ValueError: When ``tiers`` is empty.
    """
    if not tiers:
        raise ValueError("a cascade needs at least one tier")
    tried: list[TierAnswer] = []
    for number, tier in enumerate(tiers, start=1):
        answer = yield replace(request, model=tier.model, top_logprobs=tier.top_logprobs)
        tried.append(_read(answer, number=number, tier=tier, metric=metric, sample=sample))
        if settles(tried[-1].confidence, tier.threshold):
            return CascadeResult(tuple(tried), low_confidence=False)
    return CascadeResult(tuple(tried), low_confidence=True)


def _read(answer: JudgeReply | JudgeError, *, number: int, tier: Tier, metric: Metric,
          sample: Sample) -> TierAnswer:
    if isinstance(answer, JudgeError):
        return TierAnswer(number, tier.model, answer, None, None)
    result = parse_verdict(answer.text, metric=metric, sample=sample,
                           finish_reason=answer.finish_reason)
    confidence = None
    if isinstance(result, Verdict) and not result.judge_failure and answer.text is not None:
        confidence = verdict_confidence(logprob_confidences(
            answer.text, answer.logprobs, metric=metric, verdict=result))
    return TierAnswer(number, tier.model, answer, result, confidence)


def run_cascades(flows: Sequence[Generator[JudgeRequest, JudgeReply | JudgeError,
                                           CascadeResult]],
                 client: JudgeClient) -> list[CascadeResult]:
    """Drive many cascade flows together: each round sends every flow's next request.

    Args:
        flows: Fresh flows (:func:`cascade_flow`).
        client: The judge client.

    Returns:
        One result per flow, in order.
    """
    results: list[CascadeResult | None] = [None] * len(flows)
    waiting = {index: next(flow) for index, flow in enumerate(flows)}
    while waiting:
        indexes = list(waiting)
        answers = client.complete_many([waiting[index] for index in indexes])
        waiting = {}
        for index, answer in zip(indexes, answers, strict=True):
            try:
                waiting[index] = flows[index].send(answer)
            except StopIteration as done:
                results[index] = done.value
    return [result for result in results if result is not None]
