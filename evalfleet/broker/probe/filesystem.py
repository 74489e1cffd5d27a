"""Metric queues on the embedded file-system broker: one message file per waiting message.

kombu's file-system transport deletes a message's file when a worker takes it, so what
waits is exactly the files in the queue folder; what a worker holds is no longer on disk
and stays unknown. A queue of up to :data:`EXACT_COUNT_MESSAGES` files is read whole to
count its jobs (a message carries a batch); a longer one is sampled at both ends.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from evalfleet.broker.depth.filesystem import message_files
from evalfleet.broker.probe.base import QueueProbe, QueueReading
from evalfleet.broker.probe.envelope import EnvelopeSummary, summarize_envelope

#: Queues of at most this many message files are read whole to count their jobs exactly.
EXACT_COUNT_MESSAGES = 500

#: Files read at each end of a longer queue to estimate its jobs per message.
SAMPLE_MESSAGES = 50

#: What the folder cannot tell.
FILESYSTEM_NOTE = "embedded broker: jobs a worker holds are not on disk (in flight unknown)"


class FilesystemQueueProbe(QueueProbe):
    """Waiting messages and jobs per queue, from the files in the broker's folder."""

    def __init__(self, folder: Path, *,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        """Read the broker's ``queue`` folder ``folder``."""
        self._folder = folder
        self._clock = clock

    def read(self, queues: Sequence[str]) -> dict[str, QueueReading]:
        """See :meth:`QueueProbe.read`."""
        now = self._clock()
        return {queue: self._reading(queue, now=now) for queue in queues}

    def close(self) -> None:
        """Nothing to release."""

    def _reading(self, queue: str, *, now: datetime) -> QueueReading:
        names = message_files(self._folder, queue)
        if names is None:
            if not self._folder.exists():  # nothing was ever published: nothing waits
                return QueueReading(queue, read_at=now, waiting_messages=0, waiting_jobs=0,
                                    note=f"embedded broker: nothing published in "
                                         f"{self._folder} yet")
            return QueueReading(queue, read_at=now,
                                note=f"embedded broker folder {self._folder} cannot be read")
        exact = len(names) <= EXACT_COUNT_MESSAGES
        chosen = names if exact else names[:SAMPLE_MESSAGES] + names[-SAMPLE_MESSAGES:]
        summaries = [s for s in (self._summary(name) for name in chosen) if s is not None]
        if exact:
            # A file a worker took between the listing and the read no longer waits.
            messages, jobs = len(summaries), sum(s.jobs for s in summaries)
        else:
            messages = len(names)
            jobs = round(messages * sum(s.jobs for s in summaries) / max(1, len(summaries)))
        # The earliest of the files read, not the first file's: files written in one
        # millisecond sort by their random uuid.
        return QueueReading(
            queue, read_at=now, waiting_messages=messages, waiting_jobs=jobs,
            waiting_exact=exact, note=FILESYSTEM_NOTE,
            oldest_enqueued_at=min((s.oldest_enqueued_at for s in summaries
                                    if s.oldest_enqueued_at is not None), default=None))

    def _summary(self, name: str) -> EnvelopeSummary | None:
        try:
            return summarize_envelope((self._folder / name).read_bytes())
        except FileNotFoundError:
            return None
