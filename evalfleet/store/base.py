"""The verdict store contract: what the worker and the CLI need from a database.

Implementations: :class:`~evalfleet.store.postgres.PostgresStore` (production) and
:class:`~evalfleet.store.sqlite.SqliteStore` (the embedded default). Records are
plain frozen dataclasses; times are timezone-aware UTC.
"""

from __future__ import annotations

import enum
import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from evalfleet.core.errors import StoreRejected
from evalfleet.core.message import AttemptFailure, Job, encode_history, encode_job


@dataclass(frozen=True, slots=True)
class VerdictKey:
    """What makes a verdict unique: one per sample, metric, prompt version and judge model."""

    sample_id: str
    metric: str
    prompt_version: str
    judge_model: str

    def digest(self) -> str:
        """A fixed-length hex digest of the key, used to name its claim."""
        joined = "\x1f".join((self.sample_id, self.metric, self.prompt_version, self.judge_model))
        return hashlib.sha256(joined.encode("utf-8")).hexdigest()


class ClaimState(enum.Enum):
    """What :meth:`VerdictStore.claim` found."""

    CLAIMED = "claimed"
    """This worker now holds the key and should call the judge."""

    DONE = "done"
    """A verdict or a dead letter already exists: acknowledge the job, call nobody."""

    BUSY = "busy"
    """Another worker holds a live claim: try again later."""


@dataclass(frozen=True, slots=True)
class Claim:
    """The outcome of claiming a verdict key."""

    state: ClaimState
    retry_in_s: float = 0.0
    """For BUSY: seconds until the other worker's claim expires."""


@dataclass(frozen=True)
class VerdictRecord:
    """One verdict as stored."""

    key: VerdictKey
    status: str
    """``ok`` or ``failed``."""
    error_class: str | None
    error: str | None
    reason: str | None
    scores: dict[str, float | None]
    """Normalised 0..1 scores by name."""
    raw_scores: dict[str, Any]
    """The judge's own values for the same scores."""
    raw_output: str | None
    """The judge's last reply, verbatim."""
    attempts: int
    """Judge calls made for this verdict (retries and re-asks included)."""
    latency_ms: int
    """Time spent in judge calls, summed."""
    prompt_tokens: int | None
    completion_tokens: int | None
    attributes: dict[str, str]
    sample_ts: datetime
    created_at: datetime
    cost_usd: float | None = None
    """What the judge calls cost, from the model's price (None: price unknown)."""
    cached_tokens: int | None = None
    """Of ``prompt_tokens``, those the provider served from its prompt cache (priced at
    the cached rate); None when the judge did not report them."""
    notes: list[str] = field(default_factory=list)
    """Annotations the judge left out or wrote off-spec (never a reason to reject)."""
    judge_reported_model: str | None = None
    """The model the judge's last reply said answered (beside ``key.judge_model``, asked for)."""
    judge_fingerprint: str | None = None
    """The ``system_fingerprint`` of the judge's last reply, when it sent one."""
    judge_mode: str = "call"
    """How it was judged: ``call`` (while the worker waited) or ``batch`` (through the
    provider's Batch API, at its batch price; its latency is the batch's turnaround)."""
    purpose: str = "production"
    """What the verdict is for (``evalfleet.core.message.Purpose``); only production verdicts
    enter the score series that alerts and dashboards read."""
    canary_scores: dict[str, float] = field(default_factory=dict)
    """Canary verdicts only: agreement and bias with the gold labels by series name
    (``canary:<score>``, ``canary_bias:<score>``), stored in the score series beside
    the production ones for the ``judge_drift`` rule; never in the verdict's scores."""
    compaction: dict[str, int] | None = None
    """What was cut from the sample's trajectory to fit the metric's budget
    (``original_chars``, ``cut_chars``, ``pieces_cut``); None when nothing was."""
    failed_step: int | None = None
    """The trajectory step (from 1) the judge named as where things went wrong, for a
    metric whose output declares a ``step_field``; None when it named none."""
    sample: dict[str, Any] | None = None
    """The sample content judged (``input``, ``output``, ``context``, ``reference``,
    ``fields``) as the producer accepted it; None when not kept (or purged)."""
    provisional: bool = False
    """A session version closed when idle (``evalfleet.core.session.Session.provisional``):
    its scores reach the score series (alerts, corrected estimates) only once it is
    marked final (:meth:`VerdictStore.finalise`)."""
    cascade: dict[str, Any] | None = None
    """How a judge cascade reached the verdict (:func:`workers.cascade.cascade_record`):
    the tier that settled it, its model and confidence, the thresholds' version, and
    every tier tried with its confidence, scores and cost; None for one judge."""


@dataclass(frozen=True)
class JudgeIdentity:
    """What a judge model reported about itself over a span of verdicts."""

    judge_model: str
    """The model asked for."""
    reported_model: str | None
    """The model the responses named."""
    fingerprint: str | None
    """The responses' ``system_fingerprint``."""
    verdicts: int
    first_at: datetime
    """When the first verdict with this identity was stored."""
    last_at: datetime


@dataclass(frozen=True)
class CalibrationRun:
    """One ``evalfleet calibrate`` report, as kept."""

    metric: str
    prompt_version: str
    judge_model: str
    gold: str
    """The gold set's name."""
    created_at: datetime
    report: dict[str, Any]
    """The statistics per score (``evalfleet.calibration.CalibrationReport.as_json``)."""


@dataclass(frozen=True)
class DeadLetter:
    """A job that could not become a verdict, kept with its payload for replay."""

    sample_id: str | None
    metric: str | None
    error_class: str
    error: str
    attempts: int
    payload: Any
    created_at: datetime
    history: list[dict[str, Any]] = field(default_factory=list)
    """One entry per failed delivery, the last one included, oldest first: ``at``,
    ``attempt``, ``error_class``, ``error`` (see ``evalfleet.core.message.encode_history``)."""
    verdict_key: str | None = None
    """:meth:`VerdictKey.digest` of the verdict the job would have made; the store keeps
    one dead letter per key and claims treat the key as settled until it is replayed."""

    @classmethod
    def of_job(cls, job: Job, *, error_class: str, error: str, at: datetime,
               key: VerdictKey | None = None) -> DeadLetter:
        """The dead letter of a job that failed for good: its payload for replay and its
        attempt history with this last failure."""
        final = AttemptFailure.of(job, at=at, error_class=error_class, error=error)
        return cls(
            sample_id=job.sample.id, metric=job.metric, error_class=error_class, error=error,
            attempts=job.attempt, payload=encode_job(job), created_at=at,
            history=encode_history((*job.history, final)),
            verdict_key=key.digest() if key is not None else None,
        )


@dataclass(frozen=True, slots=True)
class DailyCost:
    """One metric's judging on one UTC day."""

    day: date
    metric: str
    verdicts: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    """Summed over the verdicts that have a price."""
    cached_tokens: int = 0
    """Of ``prompt_tokens``, those the provider served from its prompt cache (billed at
    the cached price; 0 where the provider reported none)."""


@dataclass(frozen=True, slots=True)
class StoreCounts:
    """How many rows the store holds."""

    verdicts: int
    dead_letters: int


class VerdictStore(ABC):
    """Persistence of verdicts, dead letters and claims."""

    @abstractmethod
    def claim(
        self, keys: Sequence[VerdictKey], *, owner: str, lease_s: float, now: datetime,
    ) -> list[Claim]:
        """For each key, check for a verdict and, if none, take the key for ``lease_s`` seconds.

        One round trip for the whole batch.

        Args:
            keys: Verdict keys of the jobs (distinct).
            owner: Who claims (the broker message id); a claim by the same owner renews.
            lease_s: How long a claim holds before others may take it over.
            now: The current time.

        Returns:
            One claim per key, in order: DONE when a verdict exists, CLAIMED when the
            caller holds the key, else BUSY.
        """

    @abstractmethod
    def save(
        self, *, verdicts: Sequence[VerdictRecord] = (), dead_letters: Sequence[DeadLetter] = (),
        release: Sequence[VerdictKey] = (), owner: str,
        on_rejected: Callable[[VerdictRecord, StoreRejected], DeadLetter] | None = None,
    ) -> int:
        """In one transaction: store verdicts (a key that has one already is skipped) with
        their scores, store dead letters, and drop ``owner``'s claims on the verdicts' keys
        and on ``release``.

        Text the database cannot hold (NUL, unpaired surrogates, non-finite numbers in
        JSON) is escaped first. A verdict the database refuses all the same (its key
        holds such text, a count is out of range) is handed to ``on_rejected``, whose
        dead letter is stored in its place; the other rows are stored as usual.

        Returns:
            How many verdicts were new.

        Raises:
            StoreUnavailable: The database cannot be reached: try again later.
            StoreRejected: A verdict was refused and ``on_rejected`` is None.
        """

    @abstractmethod
    def claim_and_save(
        self, keys: Sequence[VerdictKey], *, owner: str, lease_s: float, now: datetime,
        settle: Callable[[list[Claim]], Sequence[VerdictRecord]],
    ) -> list[Claim]:
        """:meth:`claim` the keys, then :meth:`save` the verdicts ``settle`` gives for the
        claims, all in one transaction: for work so quick (a check scored by code) that
        holding the transaction through it costs less than a second one. The claims taken
        are dropped in the same transaction, so no other worker ever sees them.

        Args:
            keys: Verdict keys of the jobs (distinct).
            owner: Who claims (the broker message id).
            lease_s: As for :meth:`claim`.
            now: The current time.
            settle: The verdicts of the keys claimed (called inside the transaction; it
                must not wait on anything). A store may run the calls of several threads
                in one transaction (PostgreSQL does): when that transaction fails, each
                call runs again alone, so ``settle`` may be called twice.

        Returns:
            One claim per key, in order, as :meth:`claim` returns them.

        Raises:
            StoreUnavailable: The database cannot be reached: nothing was claimed or stored.
            StoreRejected: The database refuses a verdict: nothing was claimed or stored
                (:meth:`claim` and :meth:`save` with ``on_rejected`` keep the others).
        """

    @abstractmethod
    def finalise(self, keys: Sequence[VerdictKey]) -> int:
        """Mark the verdicts of ``keys`` final: their scores then enter the series alerts
        and corrected estimates read (``evalfleet.store.finality``). A key with a final
        verdict is left alone; a key with no verdict yet is noted pending (committed
        first), and its verdict, saved provisional later, is marked final at its save.

        Returns:
            How many verdicts were marked final now.

        Raises:
            StoreUnavailable: The database cannot be reached: try again later.
        """

    @abstractmethod
    def finalise_pending(self, keys: Sequence[VerdictKey]) -> int:
        """Mark final the verdicts of those ``keys`` a final job came for before they
        were stored (:meth:`finalise`). :meth:`save` calls it after a save of provisional
        verdicts commits; the worker calls it when a provisional version's job finds
        its verdict stored (a save killed before its look).

        Returns:
            How many verdicts were marked final now.

        Raises:
            StoreUnavailable: The database cannot be reached: try again later.
        """

    @abstractmethod
    def iter_verdicts(
        self, *, metric: str | None = None, since: datetime | None = None,
        until: datetime | None = None, with_samples: bool = False,
        purposes: Collection[str] | None = None,
    ) -> Iterator[VerdictRecord]:
        """Stream verdicts in creation order, optionally filtered (``purposes``: only
        verdicts for these purposes; None for all); ``with_samples`` reads the sample
        each one judged too (None where none was kept)."""

    @abstractmethod
    def iter_dead_letters(self, *, metric: str | None = None,
                          since: datetime | None = None) -> Iterator[DeadLetter]:
        """Stream dead letters in creation order, optionally only those created since."""

    @abstractmethod
    def daily_costs(self, *, since: datetime) -> list[DailyCost]:
        """Verdicts, tokens and cost per metric and UTC day, for verdicts created since."""

    @abstractmethod
    def judge_identities(self, *, since: datetime) -> list[JudgeIdentity]:
        """Each identity judge models reported in verdicts stored since ``since``, by
        model asked for and then first seen (verdicts with no reported identity left out)."""

    @abstractmethod
    def save_calibration(self, run: CalibrationRun) -> None:
        """Keep a calibration report."""

    @abstractmethod
    def calibration_runs(self, *, metric: str | None = None) -> list[CalibrationRun]:
        """Calibration reports, newest first, optionally for one metric."""

    @abstractmethod
    def counts(self) -> StoreCounts:
        """Count verdicts and dead letters."""

    @abstractmethod
    def close(self) -> None:
        """Release connections."""
