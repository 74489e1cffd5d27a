"""Metric queues on a Redis broker, read where kombu keeps them
(:mod:`evalfleet.broker.redis_keys`). Jobs a worker holds for a retry countdown or a
producer delay are in flight too, with a future ``eta``.

Counting jobs means reading messages (a message carries a batch). A queue of up to
:data:`EXACT_COUNT_MESSAGES` messages is read whole; a longer one is sampled at both
ends and its job count estimated (``waiting_exact`` is then False).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import redis

from evalfleet.broker.probe.base import QueueProbe, QueueReading
from evalfleet.broker.probe.envelope import EnvelopeSummary, summarize_envelope
from evalfleet.broker.redis_keys import UNACKED_KEY, priority_keys

logger = logging.getLogger(__name__)

#: Queues of at most this many messages are read whole to count their jobs exactly.
EXACT_COUNT_MESSAGES = 500

#: Messages read at each end of a longer queue to estimate its jobs per message.
SAMPLE_MESSAGES = 50

#: Hash entries fetched per HSCAN round trip.
SCAN_COUNT = 500


@dataclass
class _InFlight:
    messages: int = 0
    jobs: int = 0
    scheduled: int = 0


class RedisQueueProbe(QueueProbe):
    """Reads waiting and in-flight jobs of metric queues from the broker's Redis database."""

    def __init__(self, client: redis.Redis, *,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        """Read through ``client`` (connected to the broker's database)."""
        self._client = client
        self._clock = clock

    @classmethod
    def from_url(cls, url: str, *, timeout_s: float = 5.0) -> RedisQueueProbe:
        """A probe on the broker at ``url`` (``redis://host:port/db``)."""
        return cls(redis.Redis.from_url(url, socket_timeout=timeout_s,
                                        socket_connect_timeout=timeout_s))

    def read(self, queues: Sequence[str]) -> dict[str, QueueReading]:
        """See :meth:`QueueProbe.read`."""
        now = self._clock()
        try:
            lengths = self._lengths(queues)
            in_flight = self._in_flight(set(queues), now=now)
            return {queue: self._reading(queue, lengths[queue], in_flight.get(queue, _InFlight()),
                                         now=now) for queue in queues}
        except redis.RedisError as exc:
            logger.debug("cannot read queues: %s", exc)
            note = f"Redis cannot be read: {type(exc).__name__}: {exc}"
            return {queue: QueueReading(queue, read_at=now, note=note) for queue in queues}

    def close(self) -> None:
        """Close the Redis connections."""
        self._client.close()

    def _lengths(self, queues: Sequence[str]) -> dict[str, dict[str, int]]:
        with self._client.pipeline(transaction=False) as pipe:
            for queue in queues:
                for key in priority_keys(queue):
                    pipe.llen(key)
            counts = iter(pipe.execute())
        return {queue: {key: int(next(counts)) for key in priority_keys(queue)}
                for queue in queues}

    def _reading(self, queue: str, lengths: dict[str, int], in_flight: _InFlight, *,
                 now: datetime) -> QueueReading:
        messages = sum(lengths.values())
        exact = messages <= EXACT_COUNT_MESSAGES
        oldest, sampled = self._sample(lengths, whole=exact)
        if exact:
            jobs = sum(summary.jobs for summary in sampled)
        else:
            jobs = round(messages * sum(s.jobs for s in sampled) / max(1, len(sampled)))
        return QueueReading(
            queue, read_at=now, waiting_messages=messages, waiting_jobs=jobs,
            waiting_exact=exact, in_flight_messages=in_flight.messages,
            in_flight_jobs=in_flight.jobs, scheduled_jobs=in_flight.scheduled,
            oldest_enqueued_at=min((s.oldest_enqueued_at for s in oldest
                                    if s.oldest_enqueued_at is not None), default=None),
        )

    def _sample(self, lengths: dict[str, int], *,
                whole: bool) -> tuple[list[EnvelopeSummary], list[EnvelopeSummary]]:
        """The oldest message of each list, and the messages read to count jobs."""
        oldest: list[EnvelopeSummary] = []
        sampled: list[EnvelopeSummary] = []
        for key, length in lengths.items():
            if not length:
                continue
            if whole or length <= 2 * SAMPLE_MESSAGES:
                raws = self._client.lrange(key, 0, -1)
            else:
                raws = (self._client.lrange(key, 0, SAMPLE_MESSAGES - 1)
                        + self._client.lrange(key, -SAMPLE_MESSAGES, -1))
            summaries = [summarize_envelope(raw) for raw in raws]
            sampled.extend(summaries)
            if summaries:
                oldest.append(summaries[-1])  # RPOP end: the next message out
        return oldest, sampled

    def _in_flight(self, queues: set[str], *, now: datetime) -> dict[str, _InFlight]:
        found: dict[str, _InFlight] = {}
        for _tag, value in self._client.hscan_iter(UNACKED_KEY, count=SCAN_COUNT):
            try:
                envelope, _exchange, routing_key = json.loads(value)
            except (TypeError, ValueError):
                continue
            if routing_key not in queues:
                continue
            summary = summarize_envelope(envelope)
            counts = found.setdefault(routing_key, _InFlight())
            counts.messages += 1
            counts.jobs += summary.jobs
            if summary.eta is not None and summary.eta > now:
                counts.scheduled += summary.jobs
        return found
