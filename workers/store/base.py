"""The verdict store contract: what the worker and the CLI need from a database.

Implementations: :class:`~workers.store.postgres.PostgresStore` (production) and
:class:`~workers.store.sqlite.SqliteStore` (the embedded default). Records are
plain frozen dataclasses; times are timezone-aware UTC.
"""

from __future__ import annotations

import enum
import hashlib
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any


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
    """A verdict already exists: acknowledge the job, call nobody."""

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


@dataclass(frozen=True, slots=True)
class StoreCounts:
    """How many rows the store holds."""

    verdicts: int
    dead_letters: int


class VerdictStore(ABC):
    """Persistence of verdicts, dead letters and claims."""

    @abstractmethod
    def claim(self, key: VerdictKey, *, owner: str, lease_s: float, now: datetime) -> Claim:
        """Check for an existing verdict and, if none, take the key for ``lease_s`` seconds.

        Args:
            key: The verdict key of the job.
            owner: Who claims (worker and job id); a claim by the same owner renews.
            lease_s: How long the claim holds before others may take it over.
            now: The current time.

        Returns:
            DONE when a verdict exists, CLAIMED when the caller holds the key, else BUSY.
        """

    @abstractmethod
    def release(self, key: VerdictKey, *, owner: str) -> None:
        """Give up a claim without a verdict (the job will be retried)."""

    @abstractmethod
    def save_verdict(self, record: VerdictRecord, *, owner: str) -> bool:
        """Store a verdict and its scores and drop the claim, atomically.

        Returns:
            True if stored; False if a verdict with the same key already existed.
        """

    @abstractmethod
    def save_dead_letter(self, letter: DeadLetter, *, key: VerdictKey | None, owner: str) -> None:
        """Store a dead letter and drop the claim on ``key``, atomically."""

    @abstractmethod
    def iter_verdicts(
        self, *, metric: str | None = None, since: datetime | None = None,
        until: datetime | None = None,
    ) -> Iterator[VerdictRecord]:
        """Stream verdicts in creation order, optionally filtered."""

    @abstractmethod
    def iter_dead_letters(self, *, metric: str | None = None) -> Iterator[DeadLetter]:
        """Stream dead letters in creation order."""

    @abstractmethod
    def counts(self) -> StoreCounts:
        """Count verdicts and dead letters."""

    @abstractmethod
    def close(self) -> None:
        """Release connections."""
