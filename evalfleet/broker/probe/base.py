"""What a broker says about a metric queue: the reading, and the probe interface."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime


@dataclass(frozen=True, slots=True)
class QueueReading:
    """One queue at one moment. None means the broker cannot tell (never a guess)."""

    queue: str
    """The queue, ``eval.<metric>``."""
    read_at: datetime
    """When it was read (UTC)."""
    waiting_messages: int | None = None
    """Broker messages waiting to be delivered."""
    waiting_jobs: int | None = None
    """Jobs in those messages (a message carries a batch)."""
    waiting_exact: bool = True
    """False when ``waiting_jobs`` is messages x the mean jobs per message of a sample."""
    in_flight_messages: int | None = None
    """Messages delivered to a worker and not yet acknowledged."""
    in_flight_jobs: int | None = None
    """Jobs in those messages."""
    scheduled_jobs: int | None = None
    """Of the jobs in flight, those a worker holds until their time comes (retry
    countdowns, producer delays)."""
    oldest_enqueued_at: datetime | None = None
    """When the producer accepted the oldest waiting job."""
    note: str | None = None
    """Why something is unknown, in words."""

    @property
    def backlog_jobs(self) -> int | None:
        """Jobs waiting plus in flight; None unless the waiting count is known."""
        if self.waiting_jobs is None:
            return None
        return self.waiting_jobs + (self.in_flight_jobs or 0)


class QueueProbe(ABC):
    """Reads metric queues on one broker."""

    @abstractmethod
    def read(self, queues: Sequence[str]) -> dict[str, QueueReading]:
        """Read each queue.

        Never raises for broker trouble: what cannot be read is None in the reading,
        with a ``note`` saying why.

        Args:
            queues: Queue names (``eval.<metric>``).

        Returns:
            A reading per queue.
        """

    @abstractmethod
    def close(self) -> None:
        """Release connections."""


class UnknownQueueProbe(QueueProbe):
    """For brokers whose queues are not read (the embedded file-system broker, others)."""

    def __init__(self, note: str) -> None:
        """Answer every reading with ``note`` as the reason."""
        self._note = note

    def read(self, queues: Sequence[str]) -> dict[str, QueueReading]:
        """Readings with everything unknown."""
        now = datetime.now(UTC)
        return {queue: QueueReading(queue, read_at=now, note=self._note) for queue in queues}

    def close(self) -> None:
        """Nothing to release."""
