"""A judge cascade for one job: ask the cheapest tier, escalate until one is sure enough.

Pure logic, driven by the edge. :func:`cascade_flow` is a generator: it yields the
request for the next tier and is sent that tier's answer (a reply or a judge error);
it returns the :class:`CascadeResult`. :func:`run_cascades` drives many flows at once
through one :class:`~workers.judge.base.JudgeClient`, a round per tier, so a delivery's
jobs escalate together within the same delivery.

Rules, in order, per tier:

- A check tier (a deterministic check before the judges) runs in the worker, no call:
  a decisive result (a failure with ``on_fail``, a pass with ``on_pass``) settles the
  job outright with the scores the metric file gives, at confidence 1 and no cost;
  otherwise (a pass with no ``on_pass``, a check that could not run) the job goes on.
- A tier with no threshold (not fitted yet, too few labels) settles nothing, so it is
  not asked at all, unless the job is a **shadow**: a sample the random review slice
  may choose is judged by every tier, whatever settles it, because fitting tier k needs
  every tier's verdict on labelled items (the kept verdict is still the first that
  settles). The last tier is always asked.
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

import threading
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from evalfleet.core.cascade import AGREEMENT_TOLERANCE, CHECK_THRESHOLD, fold_of, settles
from evalfleet.core.errors import JudgeError, JudgeRejected, StoreUnavailable
from evalfleet.core.metric import Metric, settled_scores
from evalfleet.core.price import Price, cost_usd
from evalfleet.core.sample import Sample
from evalfleet.core.scales import score_scales
from evalfleet.store.queries.cascade import StoredThresholds
from workers.checks import CheckResult, PreparedCheck
from workers.judge.base import JudgeClient, JudgeReply, JudgeRequest
from workers.verdicts import ParseFailure, Verdict, parse_verdict
from workers.verdicts.confidence import (
    agreement_confidences,
    logprob_confidences,
    verdict_confidence,
)
from workers.verdicts.result import RawValue

#: Alternatives asked per token when a tier states none.
DEFAULT_TOP_LOGPROBS = 5

#: Seconds a worker uses the thresholds it read before reading them again: a refit
#: reaches every worker within this.
THRESHOLDS_TTL_S = 60.0


@dataclass(frozen=True, slots=True)
class Tier:
    """One judge of a cascade, as the worker runs it."""

    model: str
    """The judge model asked."""
    threshold: float | None
    """Lowest confidence accepted (fitted on labels); None settles nothing."""
    top_logprobs: int = DEFAULT_TOP_LOGPROBS
    """Alternatives asked per token."""
    samples: int = 1
    """1: confidence from log-probabilities; k > 1: ask k samples at
    ``sample_temperature`` and take their agreement (k calls, no log-probabilities)."""
    sample_temperature: float = 1.0
    """Sampling temperature of the k samples."""
    endpoint: str | None = None
    """The named judge endpoint it is asked on; None: the fleet's judge."""
    check: PreparedCheck | None = None
    """A check tier's check (``model`` is then ``check:<name>``)."""
    on_fail: dict[str, float | None] | None = None
    """The scores a failed check settles; None: a failure settles nothing."""
    on_pass: dict[str, float | None] | None = None
    """The scores a passed check settles; None: a pass settles nothing."""
    batch: bool = False
    """Asked through the Batch API (``mode: batch``): the job waits in the spool for the
    tier's batch line, and the collector reads its confidence (docs/batch.md)."""

    def requests(self, request: JudgeRequest) -> tuple[JudgeRequest, ...]:
        """This tier's calls for a job's rendered request."""
        if self.samples == 1:
            return (replace(request, model=self.model, top_logprobs=self.top_logprobs,
                            endpoint=self.endpoint),)
        sampled = replace(request, model=self.model, top_logprobs=None,
                          temperature=self.sample_temperature, endpoint=self.endpoint)
        return (sampled,) * self.samples


@dataclass(frozen=True, slots=True)
class TierAnswer:
    """What one tier answered for the job."""

    tier: int
    """1 for the cheapest."""
    model: str
    answer: JudgeReply | JudgeError | None
    """None for a check tier (no call)."""
    result: Verdict | ParseFailure | None
    """The parsed reply (a check tier's settled verdict); None when the call failed (or
    the check settled nothing)."""
    confidence: float | None
    others: tuple[JudgeReply | JudgeError, ...] = ()
    """A sampled tier's other k - 1 answers (paid for, not kept)."""
    endpoint: str | None = None
    """The named endpoint that answered; None: the fleet's judge."""
    check: CheckResult | None = None
    """A check tier's result."""
    batch: bool = False
    """Answered by a batch line (priced at the batch share)."""


@dataclass(frozen=True, slots=True)
class CascadeResult:
    """How the job was settled: the kept tier's answer and every tier tried."""

    tried: tuple[TierAnswer, ...]
    """Every tier asked, in order."""
    settled_at: int | None
    """Index in ``tried`` of the answer that settled the job; None when none did (the
    last tier's answer is kept, marked low-confidence)."""

    @property
    def low_confidence(self) -> bool:
        """The kept verdict is the last tier's, below its threshold: outside the guarantee."""
        return self.settled_at is None

    @property
    def kept(self) -> TierAnswer:
        """The answer stored."""
        return self.tried[-1 if self.settled_at is None else self.settled_at]

    @property
    def settled_tier(self) -> int:
        """The tier whose answer is stored (1 for the cheapest)."""
        return self.kept.tier


#: A tier's calls, and the answers sent back for them, in the same order.
Calls = tuple[JudgeRequest, ...]
Answers = tuple[JudgeReply | JudgeError, ...]


def cascade_flow(request: JudgeRequest, tiers: Sequence[Tier], *, metric: Metric,
                 sample: Sample, shadow: bool = False,
                 ) -> Generator[Calls, Answers, CascadeResult]:
    """Ask the tiers in turn until one settles the job.

    Args:
        request: The rendered request (its model is replaced by each tier's).
        tiers: Cheapest first; at least one.
        metric: The metric judged.
        sample: The judged sample.
        shadow: Ask every tier (a review-slice sample), keeping the first that settles.

    Yields:
        The next tier's calls (one, or k for a sampled tier); send back their answers.

    Returns:
        The result.

    Raises:
        ValueError: When ``tiers`` is empty.
    """
    if not tiers:
        raise ValueError("a cascade needs at least one tier")
    tried: list[TierAnswer] = []
    settled_at: int | None = None
    for number, tier in enumerate(tiers, start=1):
        if tier.check is not None:
            tried.append(_run_check(tier, number=number, metric=metric, sample=sample))
        elif tier.threshold is None and number < len(tiers) and not shadow:
            continue  # it could settle nothing: its call would be wasted
        else:
            answers = yield tier.requests(request)
            tried.append(_read(answers, number=number, tier=tier, metric=metric,
                               sample=sample))
        if settled_at is None and settles(tried[-1].confidence, tier.threshold):
            settled_at = len(tried) - 1
            if not shadow:
                break
    return CascadeResult(tuple(tried), settled_at)


def _read(answers: Answers, *, number: int, tier: Tier, metric: Metric,
          sample: Sample) -> TierAnswer:
    parsed = [_parse(answer, metric=metric, sample=sample) for answer in answers]
    if len(answers) > 1:
        return _agreement(answers, parsed, number=number, tier=tier, metric=metric)
    (answer,), (result,) = answers, parsed
    confidence = None
    if _usable(result) and isinstance(answer, JudgeReply) and answer.text is not None:
        assert isinstance(result, Verdict)
        confidence = verdict_confidence(logprob_confidences(
            answer.text, answer.logprobs, metric=metric, verdict=result))
    return TierAnswer(number, tier.model, answer, result, confidence, endpoint=tier.endpoint,
                      batch=tier.batch)


def _run_check(tier: Tier, *, number: int, metric: Metric, sample: Sample) -> TierAnswer:
    """A check tier: decisive, it settles with the metric file's scores (confidence 1);
    otherwise it leaves the job to the next tier (confidence unknown)."""
    assert tier.check is not None
    try:
        result = tier.check.run(sample)
    except Exception as exc:  # a bug in a check: the judges take the job
        result = CheckResult.failure("internal_error", f"{type(exc).__name__}: {exc}")
    scores = (None if result.error_class is not None
              else tier.on_pass if result.score else tier.on_fail)
    if scores is None:
        return TierAnswer(number, tier.model, None, None, None, check=result)
    verdict = Verdict(fields={}, scores=dict(scores), raw_scores=_raw(scores, metric=metric),
                      reason=f"{tier.model}: {result.reason}")
    return TierAnswer(number, tier.model, None, verdict, 1.0, check=result)


def _raw(scores: Mapping[str, float | None], *, metric: Metric) -> dict[str, RawValue]:
    """Normalised scores back on the metric's own scales (a boolean for a binary one)."""
    raw: dict[str, RawValue] = {}
    scales = score_scales(metric)
    for name, value in scores.items():
        scale = scales[name]
        raw[name] = (None if value is None else value >= 0.5 if scale.kind == "binary"
                     else scale.low + value * (scale.high - scale.low))
    return raw


def _agreement(answers: Answers, parsed: list[Verdict | ParseFailure | None], *,
               number: int, tier: Tier, metric: Metric) -> TierAnswer:
    """A sampled tier: keep the verdict most of the k samples agree with; its confidence
    is the share agreeing (a failed sample agrees with nothing)."""
    verdicts = [result for result in parsed if isinstance(result, Verdict | ParseFailure)]
    best, best_confidence = 0, None
    for index, result in enumerate(parsed):
        if not _usable(result):
            continue
        assert isinstance(result, Verdict)
        confidence = verdict_confidence(agreement_confidences(
            result, verdicts, metric=metric, tolerance=AGREEMENT_TOLERANCE))
        # A failed call counts as a disagreeing sample too.
        confidence = None if confidence is None else confidence * len(verdicts) / len(answers)
        if confidence is not None and (best_confidence is None or confidence > best_confidence):
            best, best_confidence = index, confidence
    others = tuple(answer for index, answer in enumerate(answers) if index != best)
    return TierAnswer(number, tier.model, answers[best], parsed[best], best_confidence, others,
                      tier.endpoint, batch=tier.batch)


def _parse(answer: JudgeReply | JudgeError, *, metric: Metric,
           sample: Sample) -> Verdict | ParseFailure | None:
    if isinstance(answer, JudgeError):
        return None
    return parse_verdict(answer.text, metric=metric, sample=sample,
                         finish_reason=answer.finish_reason)


def _usable(result: Verdict | ParseFailure | None) -> bool:
    return isinstance(result, Verdict) and not result.judge_failure


def run_cascades(flows: Sequence[Generator[Calls, Answers, CascadeResult]],
                 client: JudgeClient) -> list[CascadeResult]:
    """Drive many cascade flows together: each round sends every flow's next request.

    Args:
        flows: Fresh flows (:func:`cascade_flow`).
        client: The judge client.

    Returns:
        One result per flow, in order.
    """
    results: list[CascadeResult | None] = [None] * len(flows)
    waiting: dict[int, Calls] = {}
    for index, flow in enumerate(flows):
        try:
            waiting[index] = next(flow)
        except StopIteration as done:  # a check tier settled it: no call
            results[index] = done.value
    while waiting:
        calls = list(waiting.items())
        answers = iter(client.complete_many([call for _, tier in calls for call in tier]))
        waiting = {}
        for index, tier in calls:
            try:
                waiting[index] = flows[index].send(tuple(next(answers) for _ in tier))
            except StopIteration as done:
                results[index] = done.value
    return [result for result in results if result is not None]


def tiers_for(metric: Metric, stored: StoredThresholds | None, *,
              checks: Mapping[int, PreparedCheck] | None = None,
              sample_id: str = "") -> list[Tier]:
    """A metric's cascade tiers with their stored thresholds (none before a fit: every
    judge tier but the last is then skipped, and the last keeps its verdict marked
    low-confidence); check tiers settle what they are decisive on, fit or not. A
    cross-fitted fit gives the thresholds of the sample's fold (fitted without the
    labels of its fold: docs/estimates.md).

    Args:
        metric: The metric, with its ``judge.cascade``.
        stored: The latest fit of this cascade, or None.
        checks: The check tiers' prepared checks, by index in the cascade.
        sample_id: The judged sample's id (its fold, for a cross-fitted fit).

    Returns:
        The tiers, cheapest first.
    """
    specs = metric.spec.judge.cascade
    fitted: Sequence[float | None] = [None] * len(specs)
    if stored is not None and len(stored.thresholds) == len(specs):
        folds = stored.folds
        fitted = (folds[fold_of(metric=metric.name, sample_id=sample_id, folds=len(folds))]
                  if folds else stored.thresholds)
    tiers = []
    for index, (spec, threshold) in enumerate(zip(specs, fitted, strict=True)):
        if spec.check is None:
            tiers.append(Tier(spec.label, threshold, spec.top_logprobs, spec.samples,
                              spec.sample_temperature, spec.endpoint,
                              batch=spec.mode == "batch"))
            continue
        prepared = (checks or {}).get(index)
        if prepared is None:
            raise ValueError(f"check tier {index + 1} of {metric.name} was not prepared")
        tiers.append(Tier(spec.label, CHECK_THRESHOLD, check=prepared,
                          on_fail=settled_scores(metric, spec, passed=False),
                          on_pass=settled_scores(metric, spec, passed=True)))
    return tiers


class CascadeRun:
    """One job's cascade as the evaluator drives it, a round of judge calls per tier.

    Args:
        request: The rendered request.
        tiers: The tiers with their thresholds.
        metric: The metric.
        sample: The sample.
        shadow: Ask every tier (:func:`cascade_flow`).
        thresholds_version: The version of the thresholds used (None: not fitted).
    """

    def __init__(self, request: JudgeRequest, tiers: Sequence[Tier], *, metric: Metric,
                 sample: Sample, shadow: bool, thresholds_version: int | None) -> None:
        self._flow = cascade_flow(request, tiers, metric=metric, sample=sample, shadow=shadow)
        self._batch_models = frozenset(tier.model for tier in tiers if tier.batch)
        self.exchanges: list[tuple[str, JudgeReply | JudgeError]] = []
        """Every answer given so far, with the model asked, in order (what a job spooled
        for a batch tier carries)."""
        self.result: CascadeResult | None = None
        """Set once the cascade is over."""
        self.calls: Calls = ()
        """The calls of the tier asked now; none when a check tier settled the job."""
        try:
            self.calls = next(self._flow)
        except StopIteration as done:
            self.result = done.value
        self.shadow = shadow
        self.thresholds_version = thresholds_version

    def take(self, answers: Answers) -> bool:
        """Give the current tier's answers, one per call, in order.

        Returns:
            True when the cascade is over (:attr:`result`); False when :attr:`calls`
            are the next tier's.
        """
        self.exchanges.extend((call.model, answer)
                              for call, answer in zip(self.calls, answers, strict=True))
        try:
            self.calls = self._flow.send(answers)
        except StopIteration as done:
            self.result = done.value
            return True
        return False

    @property
    def in_batch(self) -> bool:
        """The tier asked now is a batch tier (its request goes to the spool)."""
        return bool(self.calls) and self.result is None and \
            self.calls[0].model in self._batch_models

    def carried(self, *, without: JudgeReply | None = None) -> tuple[tuple[str, JudgeReply
                                                                        | JudgeError], ...]:
        """The answers so far, less one ``without`` (a re-ask carries its first reply
        on its own)."""
        found = list(self.exchanges)
        for index, (_, answer) in enumerate(found):
            if answer is without:
                del found[index]
                break
        return tuple(found)

    def record(self, *, identity: str, prices: Mapping[str, Price]) -> dict[str, Any]:
        """How the verdict was reached, as its ``cascade`` field stores it.

        Args:
            identity: The cascade's identity (the verdict key's judge model).
            prices: Judge model prices, to cost each tier tried.

        Returns:
            ``identity``, ``tier`` (1 for the cheapest), ``model`` and ``confidence`` of
            the kept answer, ``low_confidence``, ``shadow``, ``thresholds_version`` and
            ``tried``: per tier asked, its ``tier``, ``model``, ``endpoint`` (the named
            endpoint, None for the fleet's judge), ``mode`` (``call``, or ``batch``: a
            batch line's, priced at the batch share), ``confidence``, ``scores`` (None
            without a verdict), ``error_class`` and ``cost_usd``; a check tier's entry has
            no call (``samples`` 0, ``cost_usd`` 0) and says ``check``: ``passed`` and
            ``reason``.
        """
        assert self.result is not None
        kept = self.result.kept
        return {
            "identity": identity, "tier": kept.tier, "model": kept.model,
            "confidence": kept.confidence, "low_confidence": self.result.low_confidence,
            "shadow": self.shadow, "thresholds_version": self.thresholds_version,
            "tried": [_tried(answer, prices=prices) for answer in self.result.tried],
        }


def _tried(answer: TierAnswer, *, prices: Mapping[str, Price]) -> dict[str, Any]:
    if answer.check is not None:
        return _checked(answer)
    reply = answer.answer if isinstance(answer.answer, JudgeReply) else None
    costs = [cost_usd(prices.get(answer.model), prompt_tokens=paid.prompt_tokens,
                      completion_tokens=paid.completion_tokens, cached_tokens=paid.cached_tokens,
                      batch=answer.batch)
             for paid in (answer.answer, *answer.others) if isinstance(paid, JudgeReply)]
    error_class = (None if reply is not None
                   else "judge_rejected" if isinstance(answer.answer, JudgeRejected)
                   else "judge_unavailable")
    if isinstance(answer.result, ParseFailure):
        error_class = answer.result.error_class
    elif isinstance(answer.result, Verdict) and answer.result.judge_failure:
        error_class = "judge_declared"
    return {
        "tier": answer.tier, "model": answer.model, "endpoint": answer.endpoint,
        "mode": "batch" if answer.batch else "call", "confidence": answer.confidence,
        "scores": (dict(answer.result.scores) if isinstance(answer.result, Verdict)
                   and not answer.result.judge_failure else None),
        "error_class": error_class, "samples": 1 + len(answer.others),
        "cost_usd": (sum(cost for cost in costs if cost is not None)
                     if costs and None not in costs else None),
    }


def _checked(answer: TierAnswer) -> dict[str, Any]:
    """A check tier's entry: what it settled (scores None: nothing), at no cost."""
    assert answer.check is not None
    scores = answer.result.scores if isinstance(answer.result, Verdict) else None
    return {"tier": answer.tier, "model": answer.model, "endpoint": None,
            "confidence": answer.confidence, "scores": dict(scores) if scores else None,
            "error_class": answer.check.error_class, "samples": 0, "cost_usd": 0.0,
            "check": {"passed": (None if answer.check.score is None
                                 else bool(answer.check.score)),
                      "reason": answer.check.reason}}


class ThresholdCache:
    """The latest thresholds of each cascade, read from the store at most once a
    :data:`THRESHOLDS_TTL_S` per cascade.

    A store that cannot be read keeps the thresholds read last in use (a worker that
    never read them raises, as its claim would).

    Args:
        read: Reads the latest fit (``ThresholdBook.latest``).
        ttl_s: Seconds a read is used.
        clock: Monotonic seconds.
    """

    def __init__(self, read: Callable[..., StoredThresholds | None], *,
                 ttl_s: float = THRESHOLDS_TTL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._read = read
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._cached: dict[tuple[str, str], tuple[float, StoredThresholds | None]] = {}

    def get(self, *, metric: str, identity: str) -> StoredThresholds | None:
        """The latest fit of the metric's cascade; None before any.

        Raises:
            StoreUnavailable: The store cannot be read and nothing was read before.
        """
        now = self._clock()
        with self._lock:
            cached = self._cached.get((metric, identity))
        if cached is not None and now - cached[0] < self._ttl_s:
            return cached[1]
        try:
            stored = self._read(metric=metric, identity=identity)
        except StoreUnavailable:
            if cached is None:
                raise
            return cached[1]
        with self._lock:
            self._cached[(metric, identity)] = (now, stored)
        return stored
