"""What became of one delivery of a job, and the one place that fate is carried out.

The evaluator decides each job's :class:`Outcome` (``Evaluator.deliver``); every
consumer of jobs carries the outcomes out through :func:`carry_out` and a
:class:`FatePort` of its own: the Celery evaluate task and the save task
(:mod:`workers.app`) re-publish to the broker and pause their queue, the batch
collector (:mod:`workers.batchjudge.collector`) spools re-asks, sends jobs back to their
queue and ends its round. The order of the steps is the same for all of them, and is
what makes a crash between two steps harmless: dead letters and re-asks are written
first, then jobs go back, then the consumer pauses; only after all of it may a delivery
be acknowledged (or a batch's spool rows settled), so a crash in between runs a job
twice and the verdict key's claim makes that harmless.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from evalfleet.core.message import Job
from evalfleet.store import DeadLetter, VerdictRecord
from evalfleet.store.queries.batchspool import SpoolEntry

#: What an outcome's kind may be.
OutcomeKind = Literal["stored", "kept", "duplicate", "retry", "requeued", "paused",
                      "dead_letter", "spooled"]


@dataclass(frozen=True)
class Outcome:
    """What became of one delivery of a job. Build with the named constructors."""

    kind: OutcomeKind
    detail: str = ""
    """Verdict status, dead-letter error class, or why a retry is due."""
    retry_job: Job | None = None
    """For ``retry``, ``requeued`` and ``paused``: the job to enqueue again."""
    countdown_s: float = 0.0
    """For ``retry`` and ``requeued``: how long to wait before it runs."""
    pause_s: float = 0.0
    """For ``paused`` (and ``requeued``, ``kept``): how long the worker should stop taking
    the job's queue."""
    record: VerdictRecord | None = None
    """For ``stored`` (and ``kept``: judged, waiting in a save message): the verdict."""
    letter: DeadLetter | None = None
    """For ``dead_letter``: the letter still to store (the batch's own are stored)."""
    entry: SpoolEntry | None = None
    """For ``spooled`` by the collector's evaluator: the re-ask still to spool (its
    claim stays held)."""

    @classmethod
    def stored(cls, record: VerdictRecord) -> Outcome:
        """A verdict (``ok`` or ``failed``) was stored."""
        return cls("stored", record.status, record=record)

    @classmethod
    def spooled(cls, entry: SpoolEntry | None = None) -> Outcome:
        """The job waits in the batch spool; its claim is the batch's (docs/batch.md).
        With ``entry``, the caller must still spool it (a re-ask for a later batch)."""
        return cls("spooled", entry=entry)

    @classmethod
    def duplicate(cls) -> Outcome:
        """The verdict already existed; the judge was not called."""
        return cls("duplicate")

    @classmethod
    def retry(cls, job: Job, *, countdown_s: float, reason: str) -> Outcome:
        """Run ``job`` again after ``countdown_s`` seconds."""
        return cls("retry", reason, retry_job=job, countdown_s=countdown_s)

    @classmethod
    def paused(cls, job: Job, *, pause_s: float, reason: str) -> Outcome:
        """No judge call can be made for a while (access refused, circuit open, rate
        budget spent): put ``job`` back in the queue now and stop taking that queue for
        ``pause_s``, so the backlog waits in the broker rather than in workers."""
        return cls("paused", reason, retry_job=job, pause_s=pause_s)

    @classmethod
    def requeued(cls, job: Job | None, *, countdown_s: float, reason: str,
                 pause_s: float = 0.0) -> Outcome:
        """The delivery could not finish (the worker shuts down, the database or another
        service is away): put ``job`` back under the delivery's message id (so its copy
        takes over the delivery's claims) after ``countdown_s``, and stop taking its queue
        for ``pause_s``. None stands for a delivery that is no job (a save message): the
        port sends the delivery itself back."""
        return cls("requeued", reason, retry_job=job, countdown_s=countdown_s,
                   pause_s=pause_s)

    @classmethod
    def dead_letter(cls, error_class: str, *, letter: DeadLetter | None = None) -> Outcome:
        """The job was stored as a dead letter, or (with ``letter``) must be."""
        return cls("dead_letter", error_class, letter=letter)


class FatePort(ABC):
    """Where one consumer carries outcomes out; :func:`carry_out` calls the hooks in its
    fixed order. Each hook is called only when some outcome asks for it."""

    #: The longest countdown this consumer may wait before a job runs again, in seconds.
    longest_countdown_s: float = float("inf")

    @abstractmethod
    def keep_letters(self, letters: Sequence[DeadLetter]) -> None:
        """Store dead letters.

        Raises:
            Exception: Nothing may be acknowledged (the consumer's own kind).
        """

    def spool(self, entries: Sequence[SpoolEntry]) -> None:
        """Spool re-asks for a later batch (only the batch collector's evaluator asks)."""
        raise NotImplementedError(f"{type(self).__name__} cannot spool {len(entries)} re-ask(s)")

    @abstractmethod
    def requeue(self, jobs: Sequence[Job], *, countdown_s: float, reason: str) -> None:
        """Send the delivery back under its own id after ``countdown_s`` (``jobs``: those
        of its jobs that go back; a delivery that is no job has none)."""

    @abstractmethod
    def retry(self, job: Job, *, countdown_s: float, reason: str) -> None:
        """Send one job back to its queue, to run after ``countdown_s``."""

    @abstractmethod
    def put_back(self, jobs: Sequence[Job]) -> None:
        """Send jobs back to their queue at once (their consumer pauses instead)."""

    def pause(self, *, pause_s: float, reason: str) -> None:  # noqa: B027 - optional hook
        """Stop taking work for ``pause_s`` (no-op by default)."""


def carry_out(outcomes: Sequence[Outcome], port: FatePort) -> Counter[str]:
    """Carry out the fate decided for each job of one delivery, through ``port``.

    Dead letters still to store are stored and re-asks spooled; jobs going back under the
    delivery's id go as one; retries go each; paused jobs go back at once; the consumer
    pauses for the longest pause asked. Countdowns are capped at the port's longest.

    Args:
        outcomes: One per job of the delivery.
        port: The consumer's side of it.

    Returns:
        The outcome kinds with their counts.

    Raises:
        Exception: What a hook raised; the delivery must not be acknowledged.
    """
    letters = [outcome.letter for outcome in outcomes if outcome.letter is not None]
    if letters:
        port.keep_letters(letters)
    entries = [outcome.entry for outcome in outcomes if outcome.entry is not None]
    if entries:
        port.spool(entries)
    longest_s = port.longest_countdown_s
    requeued = [outcome for outcome in outcomes if outcome.kind == "requeued"]
    if requeued:
        port.requeue([outcome.retry_job for outcome in requeued if outcome.retry_job],
                     countdown_s=min(max(outcome.countdown_s for outcome in requeued),
                                     longest_s),
                     reason=requeued[0].detail)
    for outcome in outcomes:
        if outcome.kind == "retry" and outcome.retry_job is not None:
            port.retry(outcome.retry_job, countdown_s=min(outcome.countdown_s, longest_s),
                       reason=outcome.detail)
    paused = [outcome.retry_job for outcome in outcomes
              if outcome.kind == "paused" and outcome.retry_job is not None]
    if paused:
        port.put_back(paused)
    pausing = [outcome for outcome in outcomes if outcome.pause_s > 0]
    if pausing:
        longest = max(pausing, key=lambda outcome: outcome.pause_s)
        port.pause(pause_s=longest.pause_s, reason=longest.detail)
    return Counter(outcome.kind for outcome in outcomes)


def summary(kinds: Counter[str]) -> str:
    """Outcome kinds and counts as one log phrase (``2 retry, 30 stored``)."""
    return ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))
