"""Collecting finished batches: each line becomes a verdict through the worker's evaluator.

One round looks at every open batch. One still at work has its status and counts
recorded. One that ``failed`` without running (the enqueued-token limit, a file the
provider refused) gives its jobs back to the spool for a later batch, no attempt
counted. One that finished (``completed``, ``expired``, ``cancelled``) has its output
and error files read, lines matched to jobs by ``custom_id`` (the verdict key's digest;
the order of lines means nothing), and its jobs run through the evaluator with a judge
that answers from those lines: a line's reply is parsed and stored like any verdict, a
failed line or a request the batch left undone is a judge failure, so the job goes back
to the queue with its attempt counted (or to the dead letters after the last attempt).
An unusable reply's re-ask is spooled again under the same key, its claim still held,
for a later batch (or, with ``batch_reask_sync``, asked at once of the synchronous judge).

Killed at any point, a round is done again by the next one: verdicts already stored
make their jobs duplicates, and a spool row goes only once its job has an outcome.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from evalfleet.core.errors import InvalidMessage, JudgeError, JudgeUnavailable, RetryLater
from evalfleet.core.message import Job, decode_job
from evalfleet.core.price import Price, cost_usd
from evalfleet.store import DeadLetter
from evalfleet.store.queries.batchspool import BATCH_OWNER, BatchRow, BatchSpool, SpoolEntry
from workers.batchjudge.api import OPEN_STATUSES, BatchApi, error_message
from workers.batchjudge.mode import CollectingMode
from workers.batchjudge.provider import CollectedAnswers, first_exchange, tier_exchanges
from workers.batchjudge.tiers import TierRouter
from workers.evaluation import Evaluator
from workers.judge.base import JudgeReply
from workers.judge.fleet import JudgeFleet
from workers.judge.http_status import classify_status
from workers.judge.reply import reply_from_body
from workers.outcome import FatePort, Outcome, carry_out

logger = logging.getLogger(__name__)

#: Jobs run through the evaluator at once (one claim, one save per chunk).
CHUNK = 500

#: The steps after which :class:`Collector`'s ``step`` hook is called: a batch's first
#: result file read, a chunk's verdicts stored (its spool rows not yet dropped).
STEPS = ("downloaded", "stored")


@dataclass(frozen=True)
class _Line:
    """A spooled job of a finished batch, with the answers its requests are served
    (its line's, and a re-ask's first reply)."""

    key: str
    job: Job
    answers: list[tuple[Mapping[str, Any], JudgeReply | JudgeError]]


@dataclass
class CollectReport:
    """What one round did."""

    batches_finished: int = 0
    batches_given_back: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    bad_lines: int = 0


def collecting_evaluator(evaluator: Evaluator, *, endpoint: str,
                         reask_sync: bool = False) -> tuple[Evaluator, CollectedAnswers]:
    """The worker's evaluator as the collector uses it: judged by the batch lines through a
    :class:`JudgeFleet` of their own (the layers docs/architecture.md gives a batch
    provider: the worker's shutdown deadline, and the response-format step-down learnt
    with the worker's fleet), priced at each model's batch price (``judge_mode`` batch),
    spend not counted again (a batch's estimate was counted when it was sent), nothing
    spooled. With ``reask_on_invalid``, an unusable reply is re-asked in a later batch,
    or at once through the worker's synchronous judge with ``reask_sync``; a second
    unusable reply is stored as a failed verdict. A cascade's job runs again from its
    first tier with the worker's thresholds and checks: its carried answers and its batch
    tier's line answer those tiers, a call tier with no answer is asked of the worker's
    synchronous judge (:class:`~workers.batchjudge.tiers.TierRouter`), and a later batch
    tier waits for a later batch.

    Returns:
        The evaluator, and the provider to load each batch's answers into.
    """
    provider = CollectedAnswers(endpoint)
    worker = evaluator.judge if isinstance(evaluator.judge, JudgeFleet) else None
    fleet = JudgeFleet(provider, concurrency=1,
                       formats=worker.formats if worker is not None else None,
                       deadline=worker.deadline if worker is not None else None)
    reask = evaluator.options.reask_on_invalid
    sync = reask and reask_sync
    mode = CollectingMode(reask_in_batch=reask and not sync,
                          reask_judge=evaluator.judge if sync else None)
    return Evaluator(registry=evaluator.registry, store=evaluator.store,
                     judge=TierRouter(fleet, evaluator.judge, evaluator.registry),
                     options=evaluator.options, telemetry=evaluator.telemetry,
                     batch=mode, checks=evaluator.checks,
                     thresholds=evaluator.thresholds), provider


class Collector:
    """Turns finished batches into verdicts.

    Args:
        spool: The spool and batch record.
        api: The provider's Batch API.
        evaluator: From :func:`collecting_evaluator`.
        answers: Its provider.
        publish: Sends a job back to its queue after a countdown in seconds.
        clock: The time.
        failed_retry_s: How long the jobs of a batch that failed without running wait.
        prices: The judge models' prices (their batch share gives what batching saved).
        chunk: Jobs run through the evaluator at once.
        step: Called with each name of :data:`STEPS` as that step is done (tests stop a
            collector there).
    """

    def __init__(self, spool: BatchSpool, api: BatchApi, *, evaluator: Evaluator,
                 answers: CollectedAnswers, publish: Callable[[Job, float], None],
                 clock: Callable[[], datetime], failed_retry_s: float,
                 prices: Mapping[str, Price], chunk: int = CHUNK,
                 step: Callable[[str], None] | None = None) -> None:
        self.spool = spool
        self.api = api
        self.evaluator = evaluator
        self.answers = answers
        self._publish = publish
        self._clock = clock
        self.failed_retry_s = failed_retry_s
        self.prices = prices
        self.chunk = chunk
        self._step = step or (lambda name: None)
        self.paused_until: datetime | None = None
        """Set by a pause an outcome asked (access refused): no collecting until then."""

    def run(self) -> CollectReport:
        """One round over the open batches.

        Raises:
            JudgeError: The provider failed; batches done so far stay done.
            StoreUnavailable: The database is away.
        """
        report = CollectReport()
        if self.paused_until is not None and self._clock() < self.paused_until:
            return report
        for row in self.spool.batches("open"):
            assert row.provider_id is not None
            batch = self.api.retrieve(row.provider_id)
            status = str(batch.get("status"))
            self.spool.record_progress(row.id, batch)
            if status in OPEN_STATUSES:
                continue
            if status == "failed":
                moved = self.spool.give_back(
                    row.id, status=status, now=self._clock(),
                    not_before=self._clock() + timedelta(seconds=self.failed_retry_s))
                logger.warning("batch %s failed without running (%s): %d job(s) wait for "
                               "a later batch", row.provider_id, _errors(batch), moved)
                report.batches_given_back += 1
                continue
            self._collect(row, batch, status, report)
            report.batches_finished += 1
        return report

    def _collect(self, row: BatchRow, batch: dict[str, Any], status: str,
                 report: CollectReport) -> None:
        answers: dict[str, JudgeReply | JudgeError] = {}
        for name in ("output_file_id", "error_file_id"):
            file_id = batch.get(name)
            if isinstance(file_id, str) and file_id:
                report.bad_lines += read_lines(self.api.content(file_id), answers,
                                                batch=row.provider_id or row.id,
                                                latency_ms=_turnaround_ms(batch))
                self._step("downloaded")
        undone = JudgeUnavailable(f"left undone by the {status} batch {row.provider_id}")
        lines = self.spool.lines(row.id)
        jobs = self.spool.jobs(row.id)
        for start in range(0, len(lines), self.chunk):
            chunk = lines[start:start + self.chunk]
            runnable: list[_Line] = []
            unreadable: list[Outcome] = []
            for key, body in chunk:
                try:
                    job = decode_job(jobs[key])
                except InvalidMessage as exc:  # written by a worker: kept for a look
                    logger.error("batch %s: spooled job %s unreadable: %s", row.id, key, exc)
                    unreadable.append(Outcome.dead_letter("invalid_message", letter=DeadLetter(
                        sample_id=None, metric=None, error_class="invalid_message",
                        error=str(exc), attempts=0, payload=jobs[key],
                        created_at=self._clock(), verdict_key=key)))
                    continue
                first = first_exchange(jobs[key], body)
                runnable.append(_Line(key, job, [(body, answers.get(key, undone)),
                                                 *([first] if first else []),
                                                 *tier_exchanges(jobs[key], body)]))
            outcomes = [*unreadable, *self._judge(runnable)]
            # Re-asks are spooled and letters stored before the chunk's rows go: killed in
            # between, the next round judges the chunk again and finds the same re-asks.
            port = _RoundPort(self)
            for kind, count in carry_out(outcomes, port).items():
                report.outcomes[kind] = report.outcomes.get(kind, 0) + count
            if port.interrupted is not None:  # the chunk is judged again by a later round
                raise port.interrupted
            self._step("stored")
            keys = [key for key, _ in chunk]
            cost, saved = self._lines_cost(row.judge_model, [answers.get(key) for key in keys])
            self.spool.settle(row.id, keys, now=self._clock(), cost_usd=cost, saved_usd=saved)

    def _judge(self, lines: Sequence[_Line]) -> list[Outcome]:
        """The outcomes of a chunk's jobs, in order, as the worker's evaluator decides them
        (``Evaluator.deliver``): a bug met by one line is that job's dead letter, kept for
        replay under its verdict key, and the other lines get their verdicts; one poisoned
        line never stops batch judging."""
        self.answers.load([answer for line in lines for answer in line.answers])
        try:
            outcomes = self.evaluator.deliver([line.job for line in lines], owner=BATCH_OWNER)
        finally:
            self.answers.clear()
        return [_keyed(outcome, line.key) for outcome, line in zip(outcomes, lines, strict=True)]

    def _lines_cost(self, judge_model: str,
                    answers: Sequence[JudgeReply | JudgeError | None]) -> tuple[float, float]:
        """What a chunk's answered lines cost at the batch price, and what that saved.

        Priced from the lines the provider answered, not from the verdicts stored this
        round: a chunk judged again after a kill finds its verdicts stored already
        (duplicates, no record) and is still counted, once, as it settles."""
        price = self.prices.get(judge_model)  # a batch file holds one model
        if price is None:
            return 0.0, 0.0
        cost = sum(cost_usd(price, prompt_tokens=answer.prompt_tokens,
                            completion_tokens=answer.completion_tokens,
                            cached_tokens=answer.cached_tokens, batch=True) or 0.0
                   for answer in answers if isinstance(answer, JudgeReply))
        return cost, cost * (1 / price.batch_multiplier - 1)



class _RoundPort(FatePort):
    """Carries a chunk's outcomes out for the collector: letters stored and re-asks
    spooled under the batch's claim, jobs back to their queue. A delivery that could not
    finish (the database away, the process stopping) ends the round: its chunk is judged
    again by the next, its spool rows kept. A pause stops collecting until it ends."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector
        self.interrupted: RetryLater | None = None

    def keep_letters(self, letters: Sequence[DeadLetter]) -> None:
        """See :meth:`FatePort.keep_letters`."""
        self.collector.evaluator.store.save(dead_letters=letters, owner=BATCH_OWNER)

    def spool(self, entries: Sequence[SpoolEntry]) -> None:
        """See :meth:`FatePort.spool`: the claims stay the batch's."""
        self.collector.spool.put(entries, owner=BATCH_OWNER, now=self.collector._clock())

    def requeue(self, jobs: Sequence[Job], *, countdown_s: float, reason: str) -> None:
        """See :meth:`FatePort.requeue`: the round ends, the chunk stays spooled."""
        self.interrupted = RetryLater(f"collecting stopped: {reason}")

    def retry(self, job: Job, *, countdown_s: float, reason: str) -> None:
        """See :meth:`FatePort.retry`."""
        self.collector._publish(job, countdown_s)

    def put_back(self, jobs: Sequence[Job]) -> None:
        """See :meth:`FatePort.put_back`."""
        for job in jobs:
            self.collector._publish(job, 0.0)

    def pause(self, *, pause_s: float, reason: str) -> None:
        """See :meth:`FatePort.pause`: no batch is collected until the pause ends."""
        logger.error("batch collecting pauses for %.3g s, %s", pause_s, reason)
        self.collector.paused_until = self.collector._clock() + timedelta(seconds=pause_s)


def _keyed(outcome: Outcome, key: str) -> Outcome:
    """``outcome`` with its letter under the spooled job's verdict key (a replay finds it)."""
    if outcome.letter is None or outcome.letter.verdict_key is not None:
        return outcome
    return replace(outcome, letter=replace(outcome.letter, verdict_key=key))


def read_lines(data: bytes, answers: dict[str, JudgeReply | JudgeError], *,
                batch: str, latency_ms: int) -> int:
    """Each line's answer by custom id; returns how many lines could not be read (each is
    logged with its number, the rest go on). A verdict's latency is its batch's time
    from creation to its end."""
    bad = 0
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            custom_id, answer = _line_answer(json.loads(raw), latency_ms=latency_ms)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            logger.warning("batch %s, line %d: unreadable (%s: %s)", batch, number,
                           type(exc).__name__, exc)
            bad += 1
            continue
        answers[custom_id] = answer
    return bad


def _line_answer(record: Any, *, latency_ms: int) -> tuple[str, JudgeReply | JudgeError]:
    """A batch output or error line's custom id and what it answered.

    Raises:
        ValueError: A line of another shape (KeyError, TypeError likewise).
    """
    custom_id = record["custom_id"]
    if not isinstance(custom_id, str):
        raise ValueError("custom_id is not a string")
    response, error = record.get("response"), record.get("error")
    if isinstance(response, dict) and response.get("status_code") == 200:
        try:
            return custom_id, reply_from_body(json.dumps(response.get("body")).encode(),
                                              latency_ms=latency_ms)
        except JudgeError as exc:  # not a chat completion: a failed line
            return custom_id, exc
    if isinstance(response, dict) and isinstance(response.get("status_code"), int):
        body = response.get("body")
        message = error_message(body)
        return custom_id, classify_status(
            response["status_code"], message=f"batch line: {response['status_code']} "
                                             f"{message or ''}".strip(),
            body=body, retry_after_s=None)
    if isinstance(error, dict):
        return custom_id, JudgeUnavailable(
            f"batch line: {error.get('code')}: {error.get('message')}")
    raise ValueError("neither a response nor an error")


def _turnaround_ms(batch: dict[str, Any]) -> int:
    created = batch.get("created_at")
    ended = [batch.get(f"{name}_at") for name in ("completed", "expired", "cancelled")]
    last = max((t for t in ended if isinstance(t, int | float)), default=None)
    if not isinstance(created, int | float) or last is None:
        return 0
    return max(0, int((last - created) * 1000))


def _errors(batch: dict[str, Any]) -> str:
    errors = (batch.get("errors") or {}).get("data") if isinstance(batch.get("errors"),
                                                                    dict) else None
    if not errors:
        return "no reason given"
    return "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors[:3]
                     if isinstance(e, dict))
