"""A batch of jobs from claim to stored verdicts: the worker's logic, free of Celery.

The steps, in order: resolve each job's metric and verdict key; claim the keys
(or find verdicts already stored) in one round trip; render the prompts; call
the judge for all of them at once, with one re-ask for each unusable verdict;
store verdicts and dead letters as the answers arrive, all answers that arrived
together in one transaction. Transient judge failures come back as retry
decisions for the task to carry out; anything that cannot become a verdict
becomes a dead letter.

Saving as the answers arrive, rather than once the whole batch is judged, is what
bounds the judge calls a killed worker wastes: a verdict is durable (stored, or
held in a save message while the database is away) one transaction after its
answer, so a SIGKILL loses only the calls in flight, from request sent until
verdict durable. Those holding an unusable first reply that waits for its re-ask
(sent once every first call of the batch is answered) count as in flight too.
A redelivered message finds the saved verdicts at its claim and judges the rest.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, NamedTuple

from evalfleet.core.backoff import compute_backoff
from evalfleet.core.budget import budget_day
from evalfleet.core.canary import canary_series
from evalfleet.core.cascade import metric_cascade_identity
from evalfleet.core.errors import (
    InvalidSample,
    JudgeDeferred,
    JudgeError,
    JudgeRejected,
    RetryLater,
    StoreRejected,
    StoreUnavailable,
    UnknownMetric,
    WorkerShuttingDown,
)
from evalfleet.core.message import AttemptFailure, Job, next_attempt
from evalfleet.core.metric import Metric, MetricRegistry, OutputSpec
from evalfleet.core.price import Price, cost_usd
from evalfleet.core.review_slice import ReviewSlice
from evalfleet.core.scales import score_scales
from evalfleet.core.settings import Settings, choose_judge_model
from evalfleet.core.spend import SpendLedger
from evalfleet.store import (
    Claim,
    ClaimState,
    DeadLetter,
    VerdictKey,
    VerdictRecord,
    VerdictStore,
)
from evalfleet.store.queries.evidence import sample_content
from workers.batch_port import BatchPort, BatchRequest
from workers.cascade import CascadeRun, ThresholdCache, tiers_for
from workers.checks import CheckOutcome, CheckResult, CheckRunner, PreparedCheck
from workers.compactor import Compaction, SessionTooLong, TrajectoryTooLong
from workers.judge import JudgeClient, JudgeReply, JudgeRequest
from workers.judge.base import prompt_cache_key
from workers.judge.http_status import prompt_too_long
from workers.outcome import Outcome
from workers.renderer import ChatMessage, render
from workers.save_message import UnsavedBatch
from workers.telemetry import Telemetry
from workers.verdicts import (
    ParseFailure,
    Verdict,
    parse_verdict,
    reask_prompt,
    response_format_for,
)
from workers.verdicts.result import RawValue
from workers.verdicts.schema import ResponseFormat

logger = logging.getLogger(__name__)

#: Error class of a verdict the judge itself declared failed (seed 004).
JUDGE_DECLARED = "judge_declared"

#: Error class of a judged job whose verdict the database refuses.
UNSTORABLE = "unstorable"

#: Error class of a verdict the judge could not give: the prompt is longer than its
#: context. Re-judging it after raising the context: docs/judges.md.
CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"

#: Error class of a verdict whose trajectory cannot fit the metric's token budget even
#: compacted (its tool calls, first question and final answer alone pass it): no call.
TRAJECTORY_TOO_LONG = "trajectory_too_long"

#: The same for a session: its user messages, tool calls and last answer pass the budget.
SESSION_TOO_LONG = "session_too_long"

#: Seconds a batch waits after an answer for more to store with it in one transaction.
#: A real judge's answers to one batch spread over much of its latency; each save
#: costs about a millisecond of worker CPU, and the wait adds this much to the time a
#: call is in flight (lost to a SIGKILL), against a judge latency of hundreds of ms.
ANSWER_GATHER_S = 0.02

#: Error class of a job whose run failed unexpectedly (a bug): kept for replay.
INTERNAL_ERROR = "internal_error"

#: The ``judge_mode`` of a verdict a check gave (no judge was called).
CHECK_MODE = "check"

#: Seconds a worker stops taking a queue whose jobs could not reach the database.
STORE_PAUSE_S = 10.0

#: Longest wait before re-checking a job whose key another worker holds, in seconds.
#: The holder usually finishes within one judge call; the re-check is one query.
BUSY_RETRY_MAX_S = 5.0


@dataclass(frozen=True)
class EvaluatorOptions:
    """The settings the evaluator needs, resolved once at start-up
    (:meth:`from_settings`; the defaults are the settings' own)."""

    judge_model: str
    judge_models: dict[str, str]
    response_format_support: ResponseFormat
    reask_on_invalid: bool
    max_attempts: int
    retry_base_s: float
    retry_max_s: float
    claim_lease_s: float
    access_pause_s: float
    prices: dict[str, Price]
    """Judge model prices, to cost each verdict (at the batch share in ``batch`` mode)."""
    keep_samples: bool
    """Store the sample content with each verdict (the evidence alerts show)."""
    batch_metrics: frozenset[str] = frozenset()
    """Metrics judged in batch mode whatever their metric file says."""
    batch_purposes: frozenset[str] = frozenset()
    """Job purposes judged in batch mode whatever their metric."""
    prompt_cache_key: bool = False
    """Send each call's ``prompt_cache_key`` (its metric and prompt version)."""
    review: ReviewSlice | None = None
    """The random review slice: a cascade asks every tier for the samples it may
    choose (their labels fit the thresholds)."""

    @classmethod
    def from_settings(cls, settings: Settings) -> EvaluatorOptions:
        """The options ``settings`` give (its judge and store groups)."""
        judge = settings.judge
        return cls(
            judge_model=judge.judge_model, judge_models=dict(judge.judge_models),
            response_format_support=judge.judge_response_format,
            reask_on_invalid=judge.reask_on_invalid, max_attempts=judge.max_attempts,
            retry_base_s=judge.retry_base_s, retry_max_s=judge.retry_max_s,
            claim_lease_s=settings.store.claim_lease_s,
            access_pause_s=judge.judge_access_pause_s,
            prices=judge.resolved_model_prices(),
            keep_samples=settings.store.keep_samples,
            batch_metrics=frozenset(judge.batch_metrics),
            batch_purposes=frozenset(judge.batch_purposes),
            prompt_cache_key=judge.prompt_cache_key,
            review=settings.review.review_slice(),
        )

    def in_batch_mode(self, job: Job, metric: Metric) -> bool:
        """Whether ``job`` is judged through the Batch API (docs/batch.md); never a
        cascade's as a whole: its batch tiers are spooled tier by tier
        (:meth:`Evaluator._spool_batch_tiers`)."""
        if metric.spec.judge.cascade:
            return False
        return (metric.spec.judge.mode == "batch" or metric.name in self.batch_metrics
                or job.purpose in self.batch_purposes)


@dataclass
class _Claimed:
    """A claimed verdict key of one job of the batch (a check job has one per check)."""

    index: int
    job: Job
    metric: Metric
    key: VerdictKey


@dataclass
class _Pending(_Claimed):
    """A claimed job on its way through the judge."""

    request: JudgeRequest
    replies: list[JudgeReply] = field(default_factory=list)
    result: Verdict | ParseFailure | None = None
    first_failure: ParseFailure | None = None
    error: JudgeError | None = None
    compaction: Compaction | None = None
    cascade: CascadeRun | None = None
    """The job's judge cascade, when its metric has one."""
    models: list[str] = field(default_factory=list)
    """The model each of ``replies`` was asked of."""
    batched: list[bool] = field(default_factory=list)
    """Whether each of ``replies`` was a batch line's (priced at the batch share)."""
    kept_batch: bool = False
    """The kept cascade tier is a batch tier (its re-ask is priced as it)."""

    def take(self, answer: JudgeReply | JudgeError) -> None:
        """Record one judge answer and parse it."""
        if isinstance(answer, JudgeError):
            self.error = answer
            return
        self.replies.append(answer)
        self.models.append(self.request.model)
        self.batched.append(self.kept_batch)
        self.result = parse_verdict(answer.text, metric=self.metric, sample=self.job.sample,
                                    finish_reason=answer.finish_reason)

    def settle(self) -> None:
        """Take the answer a finished cascade kept; the other tiers' replies are
        counted (tokens, cost) before it."""
        assert self.cascade is not None and self.cascade.result is not None
        kept = self.cascade.result.kept
        for answer in self.cascade.result.tried:
            paid = answer.others if answer is kept else (answer.answer, *answer.others)
            for reply in paid:
                if isinstance(reply, JudgeReply):
                    self.replies.append(reply)
                    self.models.append(answer.model)
                    self.batched.append(answer.batch)
        self.kept_batch = kept.batch
        if kept.answer is None:  # a check tier settled it: its verdict, no reply
            self.result = kept.result
            return
        # A re-ask goes to the kept tier's model, without log-probabilities.
        self.request = replace(self.request, model=kept.model, top_logprobs=None,
                               endpoint=kept.endpoint)
        self.take(kept.answer)

    def follow_up(self) -> JudgeRequest:
        """The re-ask: the conversation so far plus what was wrong with the reply."""
        assert isinstance(self.result, ParseFailure)
        messages: list[ChatMessage] = [
            *self.request.messages,
            ChatMessage(role="assistant", content=self.replies[-1].text or ""),
            ChatMessage(role="user", content=reask_prompt(self.result, metric=self.metric)),
        ]
        return replace(self.request, messages=messages)


@dataclass
class _Batch:
    """What one batch comes to: an outcome per job and the rows to write."""

    outcomes: list[Outcome | None]
    verdicts: list[VerdictRecord] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    release: list[VerdictKey] = field(default_factory=list)


@dataclass
class _Checked:
    """What the claimed checks of a batch come to."""

    records: list[VerdictRecord] = field(default_factory=list)
    claimed: list[_Claimed] = field(default_factory=list)
    outcomes: dict[int, Outcome] = field(default_factory=dict)
    """The outcome of each job that has a claimed or busy check, by its index."""


@dataclass
class _Saving:
    """How one delivery's verdicts are being saved."""

    owner: str
    keep: Callable[[UnsavedBatch], None] | None
    store_down: StoreUnavailable | None = None
    """Set once a save of this delivery found the store unavailable."""
    kept: bool = False
    """True once rows of this delivery went to ``keep`` (a save message)."""


class Evaluator:
    """Runs jobs against a metric registry, a judge and a verdict store."""

    def __init__(
        self, *, registry: MetricRegistry, store: VerdictStore, judge: JudgeClient,
        options: EvaluatorOptions, clock: Callable[[], datetime] | None = None,
        jitter: Callable[[], float] = random.random, spend: SpendLedger | None = None,
        telemetry: Telemetry | None = None, batch: BatchPort | None = None,
        checks: CheckRunner | None = None, thresholds: ThresholdCache | None = None,
    ) -> None:
        self.registry = registry
        self.thresholds = thresholds
        """Judge cascades' fitted thresholds; None: no cascade tier settles anything."""
        self.checks = checks or CheckRunner()
        """Runs the metrics of kind ``check`` (no judge call)."""
        self.batch = batch or BatchPort()
        """The port to batch judging (the default: none, every job is judged while the
        worker waits)."""
        self.store = store
        self.judge = judge
        self.options = options
        self.spend = spend
        self.telemetry = telemetry
        self._identities: dict[str, tuple[str | None, str | None]] = {}
        self._clock = clock or (lambda: datetime.now(UTC))
        self._jitter = jitter

    def deliver(self, jobs: Sequence[Job], *, owner: str,
                keep: Callable[[UnsavedBatch], None] | None = None) -> list[Outcome]:
        """Process one delivery of a batch and decide each job's fate: the one place a
        failure becomes an outcome (the worker carries the outcomes out).

        What :meth:`run_batch` raises is decided here: the worker shutting down sends the
        jobs back at once; the database away sends them back and pauses the queue; any
        other failure that may pass sends them back after the first retry delay, never a
        dead letter; anything else (a bug) keeps them as dead letters, for replay. Back
        means under the same message id, so the copy takes over this delivery's claims
        and finds the verdicts it stored already.

        Args:
            jobs: The jobs of one broker message.
            owner: Unique per broker message (its id).
            keep: See :meth:`run_batch`.

        Returns:
            One outcome per job, in order.
        """
        metric = jobs[0].metric if jobs else ""
        longest_s = self.options.retry_max_s
        try:
            return self.run_batch(jobs, owner=owner, keep=keep)
        except WorkerShuttingDown as exc:
            logger.warning("%s: %d %s job(s) go back to the queue", exc, len(jobs), metric)
            return [Outcome.requeued(job, countdown_s=0.0, reason=str(exc)) for job in jobs]
        except StoreUnavailable as exc:
            # Back at once and the queue paused: a countdown instead would let every message
            # of the queue cycle into the workers' memory to wait there, past the visibility
            # timeout with a large backlog, and be handed out twice once the database is back.
            logger.warning("%s; %d %s job(s) go back to the queue", exc, len(jobs), metric)
            return [Outcome.requeued(job, countdown_s=0.0, reason=str(exc),
                                     pause_s=min(STORE_PAUSE_S, longest_s)) for job in jobs]
        except RetryLater as exc:  # the shared Redis away mid-batch...
            delay_s = min(self.options.retry_base_s, longest_s)
            logger.warning("%s; %d %s job(s) go back to the queue for %.1fs", exc, len(jobs),
                           metric, delay_s)
            return [Outcome.requeued(job, countdown_s=delay_s, reason=str(exc))
                    for job in jobs]
        except Exception as exc:  # a bug must not lose the jobs: keep them for replay
            logger.exception("dead letter: %d %s job(s) failed unexpectedly", len(jobs), metric)
            error = f"{type(exc).__name__}: {exc}"
            return [Outcome.dead_letter(INTERNAL_ERROR, letter=self._letter(
                job, INTERNAL_ERROR, error, key=None)) for job in jobs]

    def run(self, job: Job, *, owner: str) -> Outcome:
        """Process one delivery of one job (see :meth:`run_batch`)."""
        return self.run_batch([job], owner=owner)[0]

    def run_batch(self, jobs: Sequence[Job], *, owner: str,
                  keep: Callable[[UnsavedBatch], None] | None = None) -> list[Outcome]:
        """Process one delivery of a batch of jobs.

        Args:
            jobs: The jobs of one broker message.
            owner: Unique per broker message (its id): who holds the claims.
            keep: Keeps the judged rows durably when the store is unavailable (the
                worker publishes them as a save message); their outcomes are then
                ``kept``. Without it, or when it fails, the store's error is raised.

        Returns:
            One outcome per job, in order; ``retry`` outcomes must be enqueued by the
            caller.

        Raises:
            StoreUnavailable: The database cannot be reached and nothing was kept.
        """
        batch = _Batch(outcomes=[None] * len(jobs))
        save = _Saving(owner=owner, keep=keep)
        checked = self._run_checks(jobs, batch, owner=owner)
        self._save(batch, checked, save, final=False)
        pending = self._claim_and_render(jobs, batch, owner=owner)
        pending = self._spool_batch_mode(pending, batch, owner=owner)
        if pending:
            self._judge(pending, batch, save)
        self._save(batch, [*checked, *pending], save, final=True)
        self._observe_errors(pending)
        assert all(outcome is not None for outcome in batch.outcomes)
        return [outcome for outcome in batch.outcomes if outcome is not None]

    def _judge(self, pending: list[_Pending], batch: _Batch, save: _Saving) -> None:
        """Call the judge for ``pending``, re-ask once where a reply is unusable, and
        save the verdicts as the answers arrive."""
        reask = self._ask(pending, batch, save)
        judge = self.batch.reask_judge or self.judge
        for answered in judge.answers([item.follow_up() for item in reask],
                                      gather_s=ANSWER_GATHER_S):
            for index, answer in answered:
                if isinstance(answer, JudgeDeferred) and self._unanswered(reask[index], batch):
                    continue
                try:
                    reask[index].take(answer)
                    self._conclude(reask[index], batch)
                except (RetryLater, WorkerShuttingDown):
                    raise
                except Exception as exc:  # one job's bug costs that job alone
                    self._failed_unexpectedly(reask[index], batch, exc)
            self._save(batch, pending, save, final=False)

    def _ask(self, pending: list[_Pending], batch: _Batch, save: _Saving) -> list[_Pending]:
        """Get every job's first usable answer, saving verdicts as they arrive; a
        cascade's job escalates within this delivery, one round of calls per tier (a
        sampled tier's k calls answered together). Returns the jobs whose reply needs
        its re-ask."""
        reask: list[_Pending] = []
        asking = [(item, self._first_calls(item)) for item in pending]
        for item, calls in asking:
            if not calls:  # a cascade's check tier settled it: no judge call
                item.settle()
                self._conclude(item, batch)
        asking = [(item, calls) for item, calls in asking if calls]
        while asking:
            asking = self._spool_batch_tiers(asking, batch, owner=save.owner)
            escalated: list[tuple[_Pending, tuple[JudgeRequest, ...]]] = []
            owner = [position for position, (_, calls) in enumerate(asking) for _ in calls]
            got: dict[int, dict[int, JudgeReply | JudgeError]] = {}
            for answered in self.judge.answers([call for _, calls in asking for call in calls],
                                               gather_s=ANSWER_GATHER_S):
                for index, answer in answered:
                    item, calls = asking[owner[index]]
                    got.setdefault(owner[index], {})[index] = answer
                    if len(got[owner[index]]) < len(calls):
                        continue  # the tier's other samples are still out
                    answers = got.pop(owner[index])
                    try:
                        if self._tier_unanswered(item, answers[index], batch):
                            continue
                        if not self._take(item, tuple(answers[i] for i in sorted(answers))):
                            assert item.cascade is not None
                            escalated.append((item, item.cascade.calls))
                        elif self._needs_reask(item):
                            item.first_failure = item.result  # type: ignore[assignment]
                            reask.append(item)
                        else:
                            self._conclude(item, batch)
                    except (RetryLater, WorkerShuttingDown):
                        raise
                    except Exception as exc:  # one job's bug costs that job alone
                        self._failed_unexpectedly(item, batch, exc)
                self._save(batch, pending, save, final=False)
            asking = escalated
        return reask

    def _spool_batch_tiers(self, asking: list[tuple[_Pending, tuple[JudgeRequest, ...]]],
                           batch: _Batch, *, owner: str,
                           ) -> list[tuple[_Pending, tuple[JudgeRequest, ...]]]:
        """Hand the jobs whose cascade reached a batch tier to batch judging, carrying
        the tiers' answers so far (their claims pass to the batch), and return the rest;
        all of them where this side asks batch tiers itself (the collector, from lines).

        Raises:
            StoreUnavailable: The database cannot be reached (nothing was spooled).
        """
        chosen = [(item, calls) for item, calls in asking
                  if item.cascade is not None and item.cascade.in_batch]
        if not chosen or not self.batch.spool(
                [self._tier_request(item) for item, _ in chosen], owner=owner,
                now=self._clock()):
            return asking
        for item, _ in chosen:
            batch.outcomes[item.index] = Outcome.spooled()
        return [(item, calls) for item, calls in asking if batch.outcomes[item.index] is None]

    def _tier_unanswered(self, item: _Pending, answer: JudgeReply | JudgeError,
                         batch: _Batch) -> bool:
        """Whether batch judging took a cascade's batch-tier request no line answered (a
        later batch's), with the tiers' answers so far."""
        if item.cascade is None or not item.cascade.in_batch or \
                not isinstance(answer, JudgeError):
            return False
        outcome = self.batch.unanswered_tier(self._tier_request(item), answer)
        if outcome is not None:
            batch.outcomes[item.index] = outcome
        return outcome is not None

    @staticmethod
    def _tier_request(item: _Pending) -> BatchRequest:
        """A cascade's batch-tier request (one call: a batch tier samples once)."""
        assert item.cascade is not None
        return BatchRequest(item.key, item.metric, item.job, item.cascade.calls[0],
                            item.cascade.carried())

    @staticmethod
    def _take(item: _Pending, answers: tuple[JudgeReply | JudgeError, ...]) -> bool:
        """Give a job the answers to its calls; False when its cascade asks the next tier."""
        if item.cascade is None:
            item.take(answers[0])
            return True
        if item.cascade.take(answers):
            item.settle()
            return True
        return False

    def _first_calls(self, item: _Pending) -> tuple[JudgeRequest, ...]:
        """The first calls of a job: its request, or its cascade's first tier's."""
        specs = item.metric.spec.judge.cascade
        if not specs or item.key.judge_model != metric_cascade_identity(item.metric):
            return (item.request,)  # one judge, or a job that names its model
        stored = (self.thresholds.get(metric=item.metric.name, identity=item.key.judge_model)
                  if self.thresholds is not None else None)
        review = self.options.review
        shadow = (item.job.purpose == "production" and review is not None
                  and review.may_choose(sample_id=item.job.sample.id, metric=item.metric.name))
        tiers = tiers_for(item.metric, stored, sample_id=item.job.sample.id, checks={
            index: self.checks.prepare_check(check)
            for index, check in item.metric.tier_checks.items()})
        item.cascade = CascadeRun(item.request, tiers, metric=item.metric,
                                  sample=item.job.sample, shadow=shadow,
                                  thresholds_version=stored.version if stored else None)
        return item.cascade.calls

    def _run_checks(self, jobs: Sequence[Job], batch: _Batch, *, owner: str) -> list[_Claimed]:
        """Run the jobs of check metrics: claim one key per check of each job (one round
        trip), run the claimed checks and add their verdicts to ``batch``. No judge call,
        rate limit or breaker. Returns the claimed keys whose verdicts ``batch`` still
        holds, to save them by (none when they were stored with their claim)."""
        keyed = self._check_keys(jobs, batch)
        if not keyed:
            return []
        keys = list(dict.fromkeys(item.key for item, _ in keyed))
        if all(check.in_process for _, check in keyed) and self._claim_and_store(
                keyed, keys, batch, owner=owner):
            return []
        claims = dict(zip(keys, self.store.claim(
            keys, owner=owner, lease_s=self.options.claim_lease_s, now=self._clock()),
            strict=True))
        # Only the claimed keys' checks run: a team check costs a call to its process.
        records = self._check_records([(item, check) for item, check in keyed
                                       if claims[item.key].state is ClaimState.CLAIMED])
        checked = self._checked(keyed, claims, records=records)
        self._apply_checked(checked, batch)
        batch.verdicts.extend(checked.records)
        return checked.claimed

    def _check_keys(self, jobs: Sequence[Job],
                    batch: _Batch) -> list[tuple[_Claimed, PreparedCheck]]:
        """Each check of each check metric's job with its verdict key; those jobs are
        ``duplicate`` until a check of theirs is claimed."""
        keyed: list[tuple[_Claimed, PreparedCheck]] = []
        for index, job in enumerate(jobs):
            metric = self._check_metric(job)
            if metric is None:
                continue
            batch.outcomes[index] = Outcome.duplicate()
            keyed.extend((_Claimed(index, job, metric, VerdictKey(
                job.sample.id, metric.name, check.version, check.judge_model)), check)
                for check in self.checks.prepare(metric))
        return keyed

    def _claim_and_store(self, keyed: list[tuple[_Claimed, PreparedCheck]],
                         keys: list[VerdictKey], batch: _Batch, *, owner: str) -> bool:
        """Claim and store the checks in one transaction (checks run in this process
        take microseconds: a second transaction, with its connection check-out and
        commit, would cost more than they do). The checks run first, outside the
        transaction: it is shared with other messages (:mod:`evalfleet.store.group`), and
        work done inside it keeps theirs waiting; a key the claim finds settled or busy
        then wastes one check's microseconds. False when the database refuses a verdict:
        nothing was stored, and the two-step way keeps the others."""
        checked: list[_Checked] = []
        records = self._check_records(keyed)

        def settle(claims: list[Claim]) -> list[VerdictRecord]:
            checked.append(self._checked(keyed, dict(zip(keys, claims, strict=True)),
                                         records=records))
            return checked[-1].records

        try:
            self.store.claim_and_save(keys, owner=owner, lease_s=self.options.claim_lease_s,
                                      now=self._clock(), settle=settle)
        except StoreRejected:
            return False
        self._apply_checked(checked[-1], batch)
        self._observe(checked[-1].records)
        return True

    def _check_records(self, keyed: list[tuple[_Claimed, PreparedCheck]]
                       ) -> dict[VerdictKey, VerdictRecord]:
        """Each key's verdict, its check run (the first of a key given twice, as
        :meth:`_checked` takes)."""
        records: dict[VerdictKey, VerdictRecord] = {}
        evidence: dict[int, dict[str, Any] | None] = {}  # a job's sample, once for its checks
        for item, check in keyed:
            if item.key in records:
                continue
            if item.index not in evidence:
                evidence[item.index] = (sample_content(item.job.sample.to_json())
                                        if self.options.keep_samples else None)
            records[item.key] = self._check_record(item, check, sample=evidence[item.index])
        return records

    @staticmethod
    def _checked(keyed: list[tuple[_Claimed, PreparedCheck]], claims: dict[VerdictKey, Claim],
                 *, records: dict[VerdictKey, VerdictRecord]) -> _Checked:
        """What each job comes to by its keys' claims: the claimed keys' verdicts
        (``records``, from :meth:`_check_records`), a retry for a busy key."""
        result = _Checked()
        for item, _ in keyed:
            claim = claims.pop(item.key, None)  # the same job twice in a message: once
            if claim is None or claim.state is ClaimState.DONE:
                continue
            if claim.state is ClaimState.BUSY:
                result.outcomes[item.index] = Outcome.retry(
                    item.job, countdown_s=min(BUSY_RETRY_MAX_S, claim.retry_in_s + 1.0),
                    reason="claimed by another worker")
                continue
            record = records[item.key]
            result.records.append(record)
            result.claimed.append(item)
            current = result.outcomes.get(item.index)
            if current is None or current.kind == "duplicate":  # a retry stays a retry
                result.outcomes[item.index] = Outcome.stored(record)
        return result

    @staticmethod
    def _apply_checked(checked: _Checked, batch: _Batch) -> None:
        for index, outcome in checked.outcomes.items():
            batch.outcomes[index] = outcome

    def _check_metric(self, job: Job) -> Metric | None:
        """The metric of ``job`` if it is a check metric (an unknown metric is left to
        the judged path, which dead-letters it)."""
        try:
            metric = self.registry.get(job.metric)
        except UnknownMetric:
            return None
        return metric if metric.spec.kind == "check" else None

    def _check_record(self, item: _Claimed, check: PreparedCheck, *,
                      sample: dict[str, Any] | None) -> VerdictRecord:
        """The verdict one check gives one job's sample (``sample``: the evidence kept)."""
        job = item.job
        started = time.perf_counter()
        try:
            outcome = self.checks.run(check, job.sample)
        except Exception as exc:  # a bug in a check: a named verdict, never a lost job
            logger.exception("check %s of %s failed unexpectedly", check.name, item.key.metric)
            outcome = CheckOutcome(check, CheckResult.failure(
                INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"))
        result = outcome.result
        failed = result.error_class is not None
        return VerdictRecord(
            key=item.key, status="failed" if failed else "ok", error_class=result.error_class,
            error=result.reason if failed else None, reason=None if failed else result.reason,
            scores=outcome.scores,
            raw_scores={} if failed else {check.name: result.score}, raw_output=None,
            attempts=job.attempt, latency_ms=round((time.perf_counter() - started) * 1000),
            prompt_tokens=None, completion_tokens=None, attributes=dict(job.sample.attributes),
            sample_ts=job.sample.timestamp or job.enqueued_at, created_at=self._clock(),
            cost_usd=0.0, purpose=job.purpose, judge_mode=CHECK_MODE, sample=sample,
            provisional=_provisional_session(job))

    def _spool_batch_mode(self, pending: list[_Pending], batch: _Batch, *,
                          owner: str) -> list[_Pending]:
        """Hand the batch-mode jobs to batch judging (their claims pass to the batch) and
        return the rest; all of them when this evaluator judges batch-mode jobs itself.

        Raises:
            StoreUnavailable: The database cannot be reached (nothing was spooled).
        """
        chosen = [item for item in pending if self.options.in_batch_mode(item.job, item.metric)]
        if not chosen or not self.batch.spool(
                [BatchRequest(item.key, item.metric, item.job, item.request) for item in chosen],
                owner=owner, now=self._clock()):
            return pending
        for item in chosen:
            batch.outcomes[item.index] = Outcome.spooled()
        return [item for item in pending if batch.outcomes[item.index] is None]

    def _unanswered(self, item: _Pending, batch: _Batch) -> bool:
        """Whether batch judging took a re-ask no answer was given for (a later batch's)."""
        first = item.replies[-1]
        carried = item.cascade.carried(without=first) if item.cascade is not None else ()
        outcome = self.batch.unanswered(
            BatchRequest(item.key, item.metric, item.job, item.follow_up(), carried),
            first=first, asked=len(item.request.messages))
        if outcome is not None:
            batch.outcomes[item.index] = outcome
        return outcome is not None

    def _needs_reask(self, item: _Pending) -> bool:
        """An unusable first reply gets one re-ask carrying the error."""
        return (self.options.reask_on_invalid and item.first_failure is None
                and item.error is None and isinstance(item.result, ParseFailure))

    def _save(self, batch: _Batch, pending: Sequence[_Claimed], save: _Saving, *,
              final: bool) -> None:
        """Store what the batch has judged since the last save, in one transaction.

        Called after every group of answers, so a verdict is durable as soon as it is
        judged: a worker killed mid-batch loses only the calls still in flight. Claims
        to release alone wait for the ``final`` save.
        """
        if not (batch.verdicts or batch.dead_letters or (final and batch.release)):
            return
        if save.store_down is None:  # once it failed in this batch: straight to save messages
            try:
                self.store.save(verdicts=batch.verdicts, dead_letters=batch.dead_letters,
                                release=batch.release, owner=save.owner,
                                on_rejected=self._unstorable(batch, pending))
            except StoreUnavailable as exc:
                save.store_down = exc
        if save.store_down is not None:
            self._keep_unsaved(batch, pending, save, error=save.store_down)
        self._count_spend(batch.verdicts)
        self._observe(batch.verdicts)
        batch.verdicts, batch.dead_letters, batch.release = [], [], []

    def _keep_unsaved(self, batch: _Batch, pending: Sequence[_Claimed], save: _Saving, *,
                      error: StoreUnavailable) -> None:
        """The store is unavailable: hand the judged rows to ``save.keep`` so they are not
        judged again, or raise ``error`` when nothing of this batch was judged (the jobs
        go back to the queue, as when the claim failed) or there is no way to keep it."""
        judged = bool(batch.verdicts or batch.dead_letters or save.kept)
        if save.keep is None or not judged:
            raise error
        job_of = {item.key: item.job for item in pending}
        try:
            save.keep(UnsavedBatch(owner=save.owner, verdicts=tuple(batch.verdicts),
                                   jobs=tuple(job_of[record.key] for record in batch.verdicts),
                                   dead_letters=tuple(batch.dead_letters),
                                   release=tuple(batch.release)))
        except Exception as exc:
            logger.warning("cannot keep %d judged verdict(s) for saving: %s",
                           len(batch.verdicts), exc)
            raise error from exc
        save.kept = True
        kept = {record.key for record in batch.verdicts}
        for item in pending:
            outcome = batch.outcomes[item.index]
            if item.key in kept and outcome is not None and outcome.kind == "stored":
                # New jobs could only fail to claim: the worker stops taking the queue.
                batch.outcomes[item.index] = replace(
                    outcome, kind="kept", pause_s=min(STORE_PAUSE_S, self.options.retry_max_s),
                    detail=f"the database is unavailable; judged verdicts wait in a save "
                           f"message ({error})")

    def _observe(self, records: Sequence[VerdictRecord]) -> None:
        """Count verdicts, scores, lag, tokens and cost (Prometheus)."""
        if self.telemetry is None:
            return
        for record in records:
            self._observe_identity(record)
            if record.purpose != "production":  # dashboards show the app's traffic only
                continue
            if record.cascade is not None:
                self.telemetry.record_cascade(metric=record.key.metric,
                                              tier=record.cascade["tier"],
                                              low_confidence=record.cascade["low_confidence"])
            self.telemetry.record_verdict(
                metric=record.key.metric, status=record.status, error_class=record.error_class,
                attributes=record.attributes, scores=record.scores, sample_ts=record.sample_ts,
                created_at=record.created_at)
            if record.judge_mode == CHECK_MODE:  # no tokens, no cost: no series per check
                continue
            self.telemetry.record_cost(
                metric=record.key.metric, judge_model=record.key.judge_model,
                prompt_tokens=record.prompt_tokens, completion_tokens=record.completion_tokens,
                cached_tokens=record.cached_tokens, cost_usd=record.cost_usd)

    def _observe_errors(self, pending: Sequence[_Pending]) -> None:
        """Count judge failures, re-asked replies included (Prometheus)."""
        if self.telemetry is None:
            return
        for item in pending:
            if item.error is not None:
                self.telemetry.record_judge_error(metric=item.metric.name,
                                                  error_class=_error_class(item.error))
            if item.first_failure is not None:  # an unusable reply, re-asked
                self.telemetry.record_judge_error(metric=item.metric.name,
                                                  error_class=item.first_failure.error_class)

    def _observe_identity(self, record: VerdictRecord) -> None:
        """Count and log when a judge model starts answering as another model or backend."""
        identity = (record.judge_reported_model, record.judge_fingerprint)
        if identity == (None, None):
            return
        asked = record.key.judge_model
        previous = self._identities.get(asked)
        self._identities[asked] = identity
        if previous is not None and previous != identity:
            logger.warning("judge %s now answers as model %s, fingerprint %s (was %s, %s)",
                           asked, *identity, *previous)
            assert self.telemetry is not None
            self.telemetry.record_identity_change(judge_model=asked)

    def _count_spend(self, records: Sequence[VerdictRecord]) -> None:
        amounts: dict[str, float] = {}
        for record in records:
            if record.cost_usd:
                amounts[record.key.metric] = amounts.get(record.key.metric, 0.0) + record.cost_usd
        if self.spend is None or not amounts:
            return
        try:
            self.spend.add(amounts, day=budget_day())
        except Exception as exc:  # the verdicts are stored; a budget counter may lag
            logger.warning("cannot count spend: %s", exc)

    def verdict_key(self, job: Job, metric: Metric) -> VerdictKey:
        """The key the verdict of ``job`` is stored under on this worker: a cascade's
        identity stands for the judge model of a metric with ``judge.cascade``, unless
        the job or the settings name a model."""
        default = metric_cascade_identity(metric) if metric.spec.judge.cascade else None
        model = job.judge_model or choose_judge_model(
            metric.name, metric_default=default or metric.spec.judge.model,
            per_metric=self.options.judge_models, default=self.options.judge_model)
        return VerdictKey(job.sample.id, metric.name, metric.version, model)


    def _claim_and_render(self, jobs: Sequence[Job], batch: _Batch, *,
                          owner: str) -> list[_Pending]:
        resolved: list[tuple[int, Job, Metric, VerdictKey]] = []
        seen: set[VerdictKey] = set()
        for index, job in enumerate(jobs):
            if batch.outcomes[index] is not None:  # a check metric's job: decided already
                continue
            try:
                metric = self.registry.get(job.metric)
            except UnknownMetric as exc:
                self._dead_letter(batch, index, job, "unknown_metric", str(exc))
                continue
            key = self.verdict_key(job, metric)
            if key in seen:  # the same job twice in one message: judge it once
                batch.outcomes[index] = Outcome.duplicate()
                continue
            seen.add(key)
            resolved.append((index, job, metric, key))
        claims = self.store.claim([key for *_, key in resolved], owner=owner,
                                  lease_s=self.options.claim_lease_s, now=self._clock())
        pending: list[_Pending] = []
        final: list[VerdictKey] = []
        looks: list[VerdictKey] = []
        for (index, job, metric, key), claim in zip(resolved, claims, strict=True):
            if claim.state is ClaimState.DONE:
                batch.outcomes[index] = Outcome.duplicate()
                if _final_session(job):
                    final.append(key)
                elif _provisional_session(job):  # its save may have died before its look
                    looks.append(key)
            elif claim.state is ClaimState.BUSY and self.batch.holds(claim):
                # A batch holds the key (its claim has no expiry): it will give a verdict,
                # or send the job back itself. Waiting for it would loop for hours. A
                # final job is noted pending, so the verdict the batch saves is final.
                batch.outcomes[index] = Outcome.duplicate()
                if _final_session(job):
                    final.append(key)
            elif claim.state is ClaimState.BUSY:
                countdown_s = min(BUSY_RETRY_MAX_S, claim.retry_in_s + 1.0)
                batch.outcomes[index] = Outcome.retry(
                    job, countdown_s=countdown_s, reason="claimed by another worker")
            elif job.finalise_only:
                # Its judging was shed: no call. The idle version's verdict, when stored
                # (its job may still wait in the queue), is marked final at its save.
                batch.release.append(key)
                batch.outcomes[index] = Outcome.duplicate()
                final.append(key)
            else:
                try:
                    request, compaction = self._request(metric, job, model=key.judge_model)
                except TrajectoryTooLong as exc:
                    self._too_long(batch, _Pending(index, job, metric, key, _NO_REQUEST), exc)
                    continue
                except InvalidSample as exc:
                    self._dead_letter(batch, index, job, "invalid_sample", str(exc), key=key)
                    continue
                except Exception as exc:  # one job's bug costs that job alone
                    self._failed_unexpectedly(_Pending(index, job, metric, key, _NO_REQUEST),
                                              batch, exc)
                    continue
                pending.append(_Pending(index, job, metric, key, request,
                                        compaction=compaction))
        # The same turns sent again once final: the verdict judged while the session was
        # idle now counts (no second call, no second verdict), or will at its save.
        self.store.finalise(final)
        self.store.finalise_pending(looks)
        return pending

    def _too_long(self, batch: _Batch, item: _Pending, error: TrajectoryTooLong) -> None:
        """A trajectory that cannot be compacted into the budget: a failed verdict, no call."""
        error_class = (SESSION_TOO_LONG if isinstance(error, SessionTooLong)
                       else TRAJECTORY_TOO_LONG)
        record = self._record(item, _Judgement("failed", error_class, str(error), None,
                                               dict.fromkeys(item.metric.spec.scores), {}))
        batch.verdicts.append(record)
        batch.outcomes[item.index] = Outcome.stored(record)

    def _request(self, metric: Metric, job: Job, *,
                 model: str) -> tuple[JudgeRequest, Compaction | None]:
        options = metric.spec.judge
        rendered = render(metric, job.sample)
        return JudgeRequest(
            messages=rendered.messages, model=model,
            temperature=options.temperature, max_tokens=options.max_tokens,
            # As the metric asks, up to the configured mode; the judge fleet lowers it to
            # what the endpoint and model accept (workers.judge.gate.StepDown).
            response_format=response_format_for(
                metric, supported=self.options.response_format_support),
            metric=metric.name,
            prompt_cache_key=(prompt_cache_key(metric.name, metric.version)
                              if self.options.prompt_cache_key else None),
        ), rendered.compaction

    def _conclude(self, item: _Pending, batch: _Batch) -> None:
        if isinstance(item.error, JudgeRejected) and item.error.is_access_problem:
            # Every call would fail the same way: keep the job, stop the metric.
            batch.release.append(item.key)
            batch.outcomes[item.index] = Outcome.paused(
                item.job, pause_s=self.options.access_pause_s,
                reason=f"its judge refuses access: {item.error}")
        elif prompt_too_long(item.error):  # retrying the same prompt cannot help
            record = self._record(item, _Judgement(
                "failed", CONTEXT_LENGTH_EXCEEDED, str(item.error), None,
                dict.fromkeys(item.metric.spec.scores), {}))
            batch.verdicts.append(record)
            batch.outcomes[item.index] = Outcome.stored(record)
        elif isinstance(item.error, JudgeRejected):
            self._dead_letter(batch, item.index, item.job, "judge_rejected", str(item.error),
                              key=item.key)
        elif item.error is not None:
            self._after_transient_failure(item, batch)
        else:
            record = self._record(item, _judgement(item, output=item.metric.spec.output,
                                                   score_names=list(item.metric.spec.scores)))
            batch.verdicts.append(record)
            batch.outcomes[item.index] = Outcome.stored(record)

    def _after_transient_failure(self, item: _Pending, batch: _Batch) -> None:
        job, error = item.job, item.error
        assert error is not None
        deferred = isinstance(error, JudgeDeferred)  # never sent: not an attempt
        if job.attempt >= self.options.max_attempts and not deferred:
            self._dead_letter(batch, item.index, job, "judge_unavailable",
                              f"gave up after {job.attempt} attempts: {error}", key=item.key)
            return
        batch.release.append(item.key)
        if deferred:  # never sent, so not an attempt
            wait_s = min(getattr(error, "retry_after_s", 0.0), self.options.retry_max_s)
            batch.outcomes[item.index] = Outcome.paused(
                job, pause_s=wait_s, reason=f"the judge call was deferred: {error}")
        else:
            countdown_s = compute_backoff(
                job.attempt, base_s=self.options.retry_base_s, cap_s=self.options.retry_max_s,
                retry_after_s=getattr(error, "retry_after_s", None), jitter=self._jitter(),
            )
            next_job = next_attempt(job, failure=AttemptFailure.of(
                job, at=self._clock(), error_class=_error_class(error), error=str(error)))
            batch.outcomes[item.index] = Outcome.retry(next_job, countdown_s=countdown_s,
                                                       reason=str(error))

    def _failed_unexpectedly(self, item: _Pending, batch: _Batch, error: Exception) -> None:
        """A job whose parse, render or conclusion raised (a bug): kept as a dead letter
        under its key, for replay, while the other jobs of the delivery go on."""
        logger.exception("dead letter: %s job %s failed unexpectedly", item.job.metric,
                         item.job.sample.id)
        batch.verdicts = [kept for kept in batch.verdicts if kept.key != item.key]
        self._dead_letter(batch, item.index, item.job, INTERNAL_ERROR,
                          f"{type(error).__name__}: {error}", key=item.key)

    def _dead_letter(
        self, batch: _Batch, index: int, job: Job, error_class: str, error: str, *,
        key: VerdictKey | None = None,
    ) -> None:
        batch.dead_letters.append(self._letter(job, error_class, error, key=key))
        if key is not None:
            batch.release.append(key)
        batch.outcomes[index] = Outcome.dead_letter(error_class)

    def _letter(self, job: Job, error_class: str, error: str, *,
                key: VerdictKey | None) -> DeadLetter:
        return DeadLetter.of_job(job, error_class=error_class, error=error, at=self._clock(),
                                 key=key)

    def _unstorable(self, batch: _Batch, pending: Sequence[_Claimed],
                    ) -> Callable[[VerdictRecord, StoreRejected], DeadLetter]:
        """What the store calls for a judged verdict the database refuses: the job is
        kept as a dead letter under the verdict's key, so no redelivery judges it again."""
        by_key = {item.key: item for item in pending}

        def letter(record: VerdictRecord, error: StoreRejected) -> DeadLetter:
            item = by_key[record.key]
            batch.verdicts = [kept for kept in batch.verdicts if kept.key != record.key]
            batch.outcomes[item.index] = Outcome.dead_letter(UNSTORABLE)
            return self._letter(item.job, UNSTORABLE, str(error), key=record.key)

        return letter

    def _record(self, item: _Pending, judgement: _Judgement) -> VerdictRecord:
        """The verdict of a judge exchange (no reply at all for a refused prompt)."""
        replies, job = item.replies, item.job
        prompt_tokens = _total(reply.prompt_tokens for reply in replies)
        completion_tokens = _total(reply.completion_tokens for reply in replies)
        cached_tokens = _total(reply.cached_tokens for reply in replies)
        last = replies[-1] if replies else None
        return VerdictRecord(
            key=item.key, status=judgement.status, error_class=judgement.error_class,
            error=judgement.error, reason=judgement.reason, scores=judgement.scores,
            raw_scores=judgement.raw_scores, raw_output=last.text if last else None,
            attempts=job.attempt - 1 + max(1, len(replies)),
            latency_ms=sum(reply.latency_ms for reply in replies),
            prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
            cached_tokens=cached_tokens, attributes=dict(job.sample.attributes),
            sample_ts=job.sample.timestamp or job.enqueued_at, created_at=self._clock(),
            cost_usd=self._cost(item, prompt_tokens=prompt_tokens,
                                completion_tokens=completion_tokens,
                                cached_tokens=cached_tokens),
            notes=list(judgement.notes), judge_reported_model=last.model if last else None,
            judge_fingerprint=last.system_fingerprint if last else None, purpose=job.purpose,
            judge_mode=self.batch.judge_mode,
            canary_scores=_canary_scores(job, item.metric, judgement),
            compaction=item.compaction.as_json() if item.compaction else None,
            failed_step=judgement.failed_step, provisional=_provisional_session(job),
            sample=sample_content(job.sample.to_json()) if self.options.keep_samples else None,
            cascade=(item.cascade.record(identity=item.key.judge_model,
                                         prices=self.options.prices)
                     if item.cascade is not None and item.cascade.result is not None
                     else None),
        )

    def _cost(self, item: _Pending, *, prompt_tokens: int | None,
              completion_tokens: int | None, cached_tokens: int | None) -> float | None:
        """What a verdict's judge calls cost: a cascade's, every tier tried at its price."""
        if item.cascade is None:
            return cost_usd(self.options.prices.get(item.key.judge_model),
                            prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                            cached_tokens=cached_tokens,
                            batch=self.batch.judge_mode == "batch")
        costs = [cost_usd(self.options.prices.get(model), prompt_tokens=reply.prompt_tokens,
                          completion_tokens=reply.completion_tokens,
                          cached_tokens=reply.cached_tokens, batch=batched)
                 for reply, model, batched in zip(item.replies, item.models, item.batched,
                                                  strict=True)]
        known = [cost for cost in costs if cost is not None]
        if not costs:  # settled by a check tier: no call was paid for
            return 0.0
        return sum(known) if known and len(known) == len(costs) else None


#: The request of a job never sent (its prompt could not be rendered within budget).
_NO_REQUEST = JudgeRequest(messages=(), model="", temperature=0.0, max_tokens=1)


class _Judgement(NamedTuple):
    status: str
    error_class: str | None
    error: str | None
    reason: str | None
    scores: dict[str, float | None]
    raw_scores: dict[str, RawValue]
    notes: tuple[str, ...] = ()
    failed_step: int | None = None


def _canary_scores(job: Job, metric: Metric, judgement: _Judgement) -> dict[str, float]:
    """A canary verdict's agreement with its gold labels (none when it has no scores)."""
    if job.purpose != "canary" or not job.labels or judgement.status != "ok":
        return {}
    return canary_series(judgement.raw_scores, job.labels, scales=score_scales(metric))


def _judgement(item: _Pending, *, output: OutputSpec,
               score_names: list[str]) -> _Judgement:
    """Status, error and scores of the verdict a judge exchange ended with."""
    result = item.result
    no_scores: dict[str, float | None] = dict.fromkeys(score_names)
    if isinstance(result, Verdict) and not result.judge_failure:
        step = result.fields.get(output.step_field) if output.step_field else None
        return _Judgement("ok", None, None, result.reason, result.scores, result.raw_scores,
                          result.notes, step if isinstance(step, int) else None)
    if isinstance(result, Verdict):
        error = "the judge declared it could not evaluate this sample"
        return _Judgement("failed", JUDGE_DECLARED, error, result.reason, no_scores, {},
                          result.notes)
    assert isinstance(result, ParseFailure)
    error = result.message
    if item.first_failure is not None:
        error = f"{error} (first reply: {item.first_failure.message})"
    return _Judgement("failed", result.error_class, error, None, no_scores, {})


def _error_class(error: JudgeError) -> str:
    """The class a judge error is counted under."""
    if isinstance(error, JudgeDeferred):
        return "judge_deferred"
    if isinstance(error, JudgeRejected):
        return "judge_access" if error.is_access_problem else "judge_rejected"
    return "judge_unavailable"


def _total(values: Iterable[int | None]) -> int | None:
    known = [value for value in values if value is not None]
    return sum(known) if known else None


def _final_session(job: Job) -> bool:
    """A session version that is final (its verdict may have been stored provisional)."""
    return job.sample.session is not None and job.sample.session.final


def _provisional_session(job: Job) -> bool:
    """A session version closed when idle: its verdict is stored provisional."""
    return job.sample.session is not None and job.sample.session.provisional
