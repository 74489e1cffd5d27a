"""What tests need to know about the brokers: which ones, and when one is idle.

``EVERY_BROKER`` runs a test on Redis and on RabbitMQ through the ``broker``
fixture (tests/conftest.py); tests without it run on Redis.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import redis
from kombu import Connection

from evalfleet.broker.queues import is_amqp, is_redis
from evalfleet.core.settings import Settings
from evalfleet.store import VerdictStore
from tests.helpers import WorkerProcess

#: The brokers this project supports, as the ``broker`` fixture names them.
BROKERS = ("redis", "rabbitmq")

#: Marks a test to run once per broker.
EVERY_BROKER = pytest.mark.parametrize("broker", BROKERS, indirect=True)

#: Queues in which RabbitMQ holds delayed messages (Celery's native delayed delivery).
DELAY_QUEUES = tuple(f"celery_delayed_{level}" for level in range(28))

_RECEIVED = re.compile(rb"Task evalfleet\.evaluate\[[^\]]+\] received")
_ENDED = re.compile(rb"Task evalfleet\.evaluate\[[^\]]+\] (succeeded|failed|retry|rejected)")


def ready_counts(url: str, queues: tuple[str, ...] | list[str]) -> dict[str, int]:
    """RabbitMQ: messages ready (not delivered) in each queue that exists."""
    counts: dict[str, int] = {}
    with Connection(url) as connection:
        for queue in queues:
            channel = connection.channel()
            try:
                _, count, _ = channel.queue_declare(queue=queue, passive=True)
            except connection.channel_errors:
                continue
            counts[queue] = int(count)
            channel.close()
    return counts


def purge(url: str, queues: tuple[str, ...] | list[str]) -> None:
    """RabbitMQ: empty the queues that exist (no management plugin needed)."""
    with Connection(url) as connection:
        for queue in queues:
            channel = connection.channel()
            try:
                channel.queue_purge(queue=queue)
            except connection.channel_errors:
                continue
            channel.close()


def broker_idle(settings: Settings, *workers: WorkerProcess,
                queue: str = "eval.rag_qa") -> bool:
    """Nothing waits in ``queue`` (or, on RabbitMQ, in the delay queues) and nothing is
    delivered but unfinished.

    Redis keeps delivered messages in its ``unacked`` hash; RabbitMQ does not say
    without its management plugin, so there every message the workers logged as
    received must have been logged as ended, twice in a row.
    """
    url = settings.resolved_broker_url()
    if is_redis(settings):
        client = redis.Redis.from_url(url)
        return client.llen(queue) == 0 and client.hlen("unacked") == 0
    assert is_amqp(settings)
    for attempt in range(2):
        if attempt:
            time.sleep(0.5)
        if any(ready_counts(url, [queue, *DELAY_QUEUES]).values()):
            return False
        if not all(_all_ended(worker.log_path) for worker in workers):
            return False
    return True


def _all_ended(log_path: Path) -> bool:
    log = log_path.read_bytes()
    return len(_RECEIVED.findall(log)) == len(_ENDED.findall(log))


def fleet_state(settings: Settings, store: VerdictStore, workers: list[WorkerProcess],
                *, log_lines: int = 30) -> str:
    """What a timed-out test should report: stored counts, the broker's queue (Redis:
    waiting, unacknowledged, the restore lock's time to live) and each worker's log tail."""
    counts = store.counts()
    lines = [f"store: {counts.verdicts} verdicts, {counts.dead_letters} dead letters"]
    if is_redis(settings):
        client = redis.Redis.from_url(settings.resolved_broker_url())
        lines.append(f"redis: {client.llen('eval.rag_qa')} waiting, "
                     f"{client.hlen('unacked')} unacked, restore lock ttl "
                     f"{client.ttl('unacked_mutex')} s")
    for worker in workers:
        tail = worker.log_path.read_text(errors="replace").splitlines()[-log_lines:]
        lines += [f"--- {worker.log_path.name} (exit {worker.process.poll()})", *tail]
    return "\n".join(lines)
