"""The I/O behind liveness and readiness: broker, database and judge, each with a timeout.

Every check returns a :class:`~workers.health.readiness.CheckResult` and never
raises; reading queue depths raises :class:`~evalfleet.core.errors.BrokerUnavailable`,
the one place where the broker libraries' exceptions are translated here. The database
is asked through the store (:class:`~evalfleet.store.reach.DatabasePing`), the judge
through the provider contract, on a fleet of its own (:class:`JudgeProbe`): the same
provider, URL and credentials the worker's calls use, whatever API the provider speaks.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

import redis
from kombu import Connection

from evalfleet.broker.errors import BROKER_ERRORS
from evalfleet.broker.queues import broker_transport_options, is_redis
from evalfleet.core.errors import BrokerUnavailable, JudgeError, StoreUnavailable
from evalfleet.core.settings import Settings, mask_url
from evalfleet.store.reach import DatabasePing
from workers.health.readiness import CheckResult, judge_result
from workers.judge.fleet import JudgeFleet
from workers.runtime import build_probe_fleet

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


class BrokerProbe(ABC):
    """Asks the broker whether it answers and how many messages wait in some queues."""

    @abstractmethod
    def depths(self, queues: Sequence[str]) -> dict[str, int]:
        """Messages waiting (not yet delivered) in each queue; 0 for a queue not declared.

        Raises:
            BrokerUnavailable: When the broker cannot be reached.
        """

    def check(self) -> CheckResult:
        """Readiness: the broker answers."""
        try:
            self.depths([])
        except BrokerUnavailable as exc:
            return CheckResult.unreachable("broker", str(exc))
        return CheckResult.passed("broker")


class RedisBrokerProbe(BrokerProbe):
    """Redis: ``PING`` and ``LLEN``, on a client of its own.

    Args:
        url: The broker's Redis URL.
        timeout_s: Socket timeout.
    """

    def __init__(self, url: str, *, timeout_s: float) -> None:
        self._client = redis.Redis.from_url(url, socket_timeout=timeout_s,
                                            socket_connect_timeout=timeout_s)

    def depths(self, queues: Sequence[str]) -> dict[str, int]:
        """See :meth:`BrokerProbe.depths`."""
        try:
            pipe = self._client.pipeline(transaction=False)
            pipe.ping()
            for queue in queues:
                pipe.llen(queue)
            _, *lengths = pipe.execute()
        except redis.RedisError as exc:
            raise BrokerUnavailable(f"Redis unreachable: {type(exc).__name__}: {exc}") from exc
        return dict(zip(queues, (int(length) for length in lengths), strict=True))


class KombuBrokerProbe(BrokerProbe):
    """Any kombu transport (RabbitMQ, the file-system broker): a passive queue declare
    per queue on a short-lived connection.

    Args:
        url: The broker URL.
        transport_options: The transport options the fleet uses.
        timeout_s: Connect timeout.
    """

    def __init__(self, url: str, *, transport_options: dict[str, Any], timeout_s: float) -> None:
        self._url = url
        self._options = transport_options
        self._timeout_s = timeout_s

    def depths(self, queues: Sequence[str]) -> dict[str, int]:
        """See :meth:`BrokerProbe.depths`."""
        try:
            with Connection(self._url, transport_options=self._options,
                            connect_timeout=self._timeout_s) as connection:
                connection.ensure_connection(max_retries=1, interval_start=0,
                                             interval_step=0, timeout=self._timeout_s)
                return {queue: _declared_depth(connection, queue) for queue in queues}
        except BROKER_ERRORS as exc:
            raise BrokerUnavailable(
                f"broker {mask_url(self._url)} unreachable: {type(exc).__name__}: {exc}",
            ) from exc


def _declared_depth(connection: Connection, queue: str) -> int:
    channel = connection.channel()
    try:
        _, depth, _ = channel.queue_declare(queue=queue, passive=True)
    except connection.channel_errors:  # not declared yet: nothing waits in it
        return 0
    finally:
        _close_quietly(channel)
    return int(depth)


def _close_quietly(channel: Any) -> None:
    try:
        channel.close()
    except Exception:  # a channel the broker already closed (404) cannot close again
        return


def broker_probe(settings: Settings) -> BrokerProbe:
    """The probe for the configured broker."""
    timeout_s = settings.worker.readiness_timeout_s
    if is_redis(settings):
        return RedisBrokerProbe(settings.resolved_broker_url(), timeout_s=timeout_s)
    return KombuBrokerProbe(settings.resolved_broker_url(),
                            transport_options=broker_transport_options(settings, concurrency=1),
                            timeout_s=timeout_s)


class DatabaseProbe:
    """``SELECT 1`` on a fresh connection (none is kept between checks).

    Args:
        url: The database URL.
        timeout_s: Connect timeout.
    """

    def __init__(self, url: str, *, timeout_s: float) -> None:
        self._ping = DatabasePing(url, timeout_s=timeout_s)

    def check(self) -> CheckResult:
        """Readiness: the database answers a query."""
        try:
            self._ping.ping()
        except StoreUnavailable as exc:
            return CheckResult.unreachable("database", str(exc))
        return CheckResult.passed("database")


class JudgeProbe:
    """Asks the judge, and each named endpoint, for its model list through the provider
    contract (:meth:`JudgeFleet.list_models`).

    Args:
        fleet: The providers to ask (its own: no call of the worker's waits behind it).
        timeout_s: Longest wait for one list.
    """

    def __init__(self, fleet: JudgeFleet, *, timeout_s: float) -> None:
        self.fleet = fleet
        self._timeout_s = timeout_s

    def check(self) -> CheckResult:
        """Readiness: the judge answers, and accepts the key."""
        return self._ask(None, name="judge")

    def check_endpoint(self, endpoint: str) -> CheckResult:
        """The same for a named endpoint: not required (its tiers' jobs escalate)."""
        return self._ask(endpoint, name=f"judge endpoint {endpoint}").optional()

    def checks(self) -> list[tuple[str, Callable[[], CheckResult]]]:
        """``(name, check)`` of the judge and of each named endpoint."""
        named = [(f"judge endpoint {name}", functools.partial(self.check_endpoint, name))
                 for name in sorted(self.fleet.endpoints)]
        return [("judge", self.check), *named]

    def _ask(self, endpoint: str | None, *, name: str) -> CheckResult:
        try:
            self.fleet.list_models(endpoint, timeout_s=self._timeout_s)
        except JudgeError as exc:
            return judge_result(exc, name=name)
        return judge_result(None, name=name)

    def close(self) -> None:
        """Release the providers' connections."""
        self.fleet.close()


def judge_probe(settings: Settings) -> JudgeProbe:
    """The judge probe for the settings: the judge and every named endpoint, each on the
    provider ``EVALFLEET_JUDGE_CLIENT`` names."""
    if settings.worker.judge_probe_url:
        logger.warning("EVALFLEET_JUDGE_PROBE_URL is no longer read: readiness asks the "
                       "judge's provider for its model list")
    return JudgeProbe(build_probe_fleet(settings), timeout_s=settings.worker.readiness_timeout_s)


def run_checks(checks: Sequence[tuple[str, Callable[[], CheckResult]]], *,
               timeout_s: float) -> list[CheckResult]:
    """Run the checks at once, each on a daemon thread, waiting at most ``timeout_s``.

    Args:
        checks: ``(name, check)`` pairs.
        timeout_s: How long to wait for all of them.

    Returns:
        One result per check, in order; a check still running counts as unreachable.
    """
    deadline_s = time.monotonic() + timeout_s
    futures = [(name, _in_thread(check)) for name, check in checks]
    results = []
    for name, future in futures:
        try:
            results.append(future.result(timeout=max(0.0, deadline_s - time.monotonic())))
        except TimeoutError:
            results.append(CheckResult.unreachable(name, f"no answer within {timeout_s:g} s"))
        except Exception as exc:  # a check that broke must not break the endpoint
            results.append(CheckResult.unreachable(name, f"{type(exc).__name__}: {exc}"))
    return results


def _in_thread(call: Callable[[], _T]) -> Future[_T]:
    future: Future[_T] = Future()

    def run() -> None:
        try:
            future.set_result(call())
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=run, name="health-check", daemon=True).start()
    return future
