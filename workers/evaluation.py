"""One job from claim to stored verdict: the worker's logic, free of Celery.

The steps, in order: resolve the metric and the verdict key; claim the key (or
find the verdict already stored); render the prompt; call the judge, with one
re-ask when its verdict is unusable; store the verdict. Transient judge
failures come back as a retry decision for the task to carry out; anything that
cannot become a verdict becomes a dead letter.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Literal, NamedTuple

from evalfleet.errors import InvalidSample, JudgeRejected, JudgeUnavailable, UnknownMetric
from evalfleet.message import Job, encode_job
from evalfleet.metric import Metric, MetricRegistry
from workers.backoff import compute_backoff
from workers.judge import JudgeClient, JudgeReply, JudgeRequest
from workers.renderer import ChatMessage, render_messages
from workers.store import ClaimState, DeadLetter, VerdictKey, VerdictRecord, VerdictStore
from workers.verdicts import (
    ParseFailure,
    Verdict,
    parse_verdict,
    reask_prompt,
    response_format_for,
)
from workers.verdicts.result import RawValue

#: Error class of a verdict the judge itself declared failed (seed 004).
JUDGE_DECLARED = "judge_declared"

#: Longest wait before re-checking a job whose key another worker holds, in seconds.
#: The holder usually finishes within one judge call; the re-check is one query.
BUSY_RETRY_MAX_S = 5.0


@dataclass(frozen=True)
class EvaluatorOptions:
    """The settings the evaluator needs, resolved once at start-up."""

    judge_model: str
    judge_models: dict[str, str] = field(default_factory=dict)
    response_format_support: Literal["json_schema", "json_object", "text"] = "json_schema"
    reask_on_invalid: bool = True
    max_attempts: int = 6
    retry_base_s: float = 2.0
    retry_max_s: float = 300.0
    claim_lease_s: float = 600.0


@dataclass(frozen=True)
class Outcome:
    """What became of one delivery of a job. Build with the named constructors."""

    kind: Literal["stored", "duplicate", "retry", "dead_letter"]
    detail: str = ""
    """Verdict status, dead-letter error class, or why a retry is due."""
    retry_job: Job | None = None
    """For ``retry``: the job to enqueue again."""
    countdown_s: float = 0.0
    """For ``retry``: how long to wait before it runs."""

    @classmethod
    def stored(cls, status: str) -> Outcome:
        """A verdict (``ok`` or ``failed``) was stored."""
        return cls("stored", status)

    @classmethod
    def duplicate(cls) -> Outcome:
        """The verdict already existed; the judge was not called."""
        return cls("duplicate")

    @classmethod
    def retry(cls, job: Job, *, countdown_s: float, reason: str) -> Outcome:
        """Run ``job`` again after ``countdown_s`` seconds."""
        return cls("retry", reason, retry_job=job, countdown_s=countdown_s)

    @classmethod
    def dead_letter(cls, error_class: str) -> Outcome:
        """The job was stored as a dead letter."""
        return cls("dead_letter", error_class)


@dataclass
class _Exchange:
    """The judge calls made for one delivery and where they ended."""

    replies: list[JudgeReply] = field(default_factory=list)
    result: Verdict | ParseFailure | None = None
    first_failure: ParseFailure | None = None


class Evaluator:
    """Runs jobs against a metric registry, a judge and a verdict store."""

    def __init__(
        self, *, registry: MetricRegistry, store: VerdictStore, judge: JudgeClient,
        options: EvaluatorOptions, clock: Callable[[], datetime] | None = None,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.registry = registry
        self.store = store
        self.judge = judge
        self.options = options
        self._clock = clock or (lambda: datetime.now(UTC))
        self._jitter = jitter

    def run(self, job: Job, *, owner: str) -> Outcome:
        """Process one delivery of ``job``.

        Args:
            job: The job.
            owner: Unique per broker message (its id): who holds the claim.

        Returns:
            What happened; a ``retry`` outcome must be enqueued by the caller.
        """
        try:
            metric = self.registry.get(job.metric)
        except UnknownMetric as exc:
            return self._dead_letter(job, "unknown_metric", str(exc), key=None, owner=owner)
        key = self.verdict_key(job, metric)
        claim = self.store.claim(key, owner=owner, lease_s=self.options.claim_lease_s,
                                 now=self._clock())
        if claim.state is ClaimState.DONE:
            return Outcome.duplicate()
        if claim.state is ClaimState.BUSY:
            countdown_s = min(BUSY_RETRY_MAX_S, claim.retry_in_s + 1.0)
            return Outcome.retry(job, countdown_s=countdown_s, reason="claimed by another worker")
        try:
            messages = render_messages(metric, job.sample)
        except InvalidSample as exc:
            return self._dead_letter(job, "invalid_sample", str(exc), key=key, owner=owner)
        try:
            exchange = self._ask_judge(metric, job, messages, model=key.judge_model)
        except JudgeUnavailable as exc:
            return self._after_transient_failure(job, key, exc, owner=owner)
        except JudgeRejected as exc:
            return self._dead_letter(job, "judge_rejected", str(exc), key=key, owner=owner)
        record = self._record(job, key, metric, exchange)
        self.store.save_verdict(record, owner=owner)
        return Outcome.stored(record.status)

    def verdict_key(self, job: Job, metric: Metric) -> VerdictKey:
        """The key the verdict of ``job`` is stored under on this worker."""
        model = (
            self.options.judge_models.get(metric.name) or metric.spec.judge.model
            or self.options.judge_model
        )
        return VerdictKey(job.sample.id, metric.name, metric.version, model)

    def _ask_judge(
        self, metric: Metric, job: Job, messages: list[ChatMessage], *, model: str,
    ) -> _Exchange:
        judge_options = metric.spec.judge
        request = JudgeRequest(
            messages=messages, model=model, temperature=judge_options.temperature,
            max_tokens=judge_options.max_tokens,
            response_format=response_format_for(
                metric, supported=self.options.response_format_support,
            ),
        )
        exchange = _Exchange()
        reply = self.judge.complete(request)
        exchange.replies.append(reply)
        exchange.result = parse_verdict(
            reply.text, metric=metric, sample=job.sample, finish_reason=reply.finish_reason,
        )
        if isinstance(exchange.result, ParseFailure) and self.options.reask_on_invalid:
            exchange.first_failure = exchange.result
            follow_up: list[ChatMessage] = [
                *messages,
                ChatMessage(role="assistant", content=reply.text or ""),
                ChatMessage(role="user", content=reask_prompt(exchange.result, metric=metric)),
            ]
            reply = self.judge.complete(replace(request, messages=follow_up))
            exchange.replies.append(reply)
            exchange.result = parse_verdict(
                reply.text, metric=metric, sample=job.sample, finish_reason=reply.finish_reason,
            )
        return exchange

    def _after_transient_failure(
        self, job: Job, key: VerdictKey, exc: JudgeUnavailable, *, owner: str,
    ) -> Outcome:
        if job.attempt >= self.options.max_attempts:
            error = f"gave up after {job.attempt} attempts: {exc}"
            return self._dead_letter(job, "judge_unavailable", error, key=key, owner=owner)
        self.store.release(key, owner=owner)
        countdown_s = compute_backoff(
            job.attempt, base_s=self.options.retry_base_s, cap_s=self.options.retry_max_s,
            retry_after_s=exc.retry_after_s, jitter=self._jitter(),
        )
        next_job = replace(job, attempt=job.attempt + 1)
        return Outcome.retry(next_job, countdown_s=countdown_s, reason=str(exc))

    def _dead_letter(
        self, job: Job, error_class: str, error: str, *, key: VerdictKey | None, owner: str,
    ) -> Outcome:
        letter = DeadLetter(
            sample_id=job.sample.id, metric=job.metric, error_class=error_class, error=error,
            attempts=job.attempt, payload=encode_job(job), created_at=self._clock(),
        )
        self.store.save_dead_letter(letter, key=key, owner=owner)
        return Outcome.dead_letter(error_class)

    def _record(
        self, job: Job, key: VerdictKey, metric: Metric, exchange: _Exchange,
    ) -> VerdictRecord:
        judgement = _judgement(exchange, score_names=list(metric.spec.scores))
        replies = exchange.replies
        return VerdictRecord(
            key=key, status=judgement.status, error_class=judgement.error_class,
            error=judgement.error, reason=judgement.reason, scores=judgement.scores,
            raw_scores=judgement.raw_scores, raw_output=replies[-1].text,
            attempts=job.attempt - 1 + len(replies),
            latency_ms=sum(reply.latency_ms for reply in replies),
            prompt_tokens=_total(reply.prompt_tokens for reply in replies),
            completion_tokens=_total(reply.completion_tokens for reply in replies),
            attributes=dict(job.sample.attributes),
            sample_ts=job.sample.timestamp or job.enqueued_at, created_at=self._clock(),
        )


class _Judgement(NamedTuple):
    status: str
    error_class: str | None
    error: str | None
    reason: str | None
    scores: dict[str, float | None]
    raw_scores: dict[str, RawValue]


def _judgement(exchange: _Exchange, *, score_names: list[str]) -> _Judgement:
    """Status, error and scores of the verdict a judge exchange ended with."""
    result = exchange.result
    no_scores: dict[str, float | None] = dict.fromkeys(score_names)
    if isinstance(result, Verdict) and not result.judge_failure:
        return _Judgement("ok", None, None, result.reason, result.scores, result.raw_scores)
    if isinstance(result, Verdict):
        error = "the judge declared it could not evaluate this sample"
        return _Judgement("failed", JUDGE_DECLARED, error, result.reason, no_scores, {})
    assert isinstance(result, ParseFailure)
    error = result.message
    if exchange.first_failure is not None:
        error = f"{error} (first reply: {exchange.first_failure.message})"
    return _Judgement("failed", result.error_class, error, None, no_scores, {})


def _total(values: Iterable[int | None]) -> int | None:
    known = [value for value in values if value is not None]
    return sum(known) if known else None
