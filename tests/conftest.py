"""Fixtures for tests against the real services: Postgres, Redis, RabbitMQ and the judge
simulator.

A missing service fails the run; nothing here skips. Service addresses can be
moved with EVALFLEET_TEST_POSTGRES / EVALFLEET_TEST_REDIS / EVALFLEET_TEST_RABBITMQ
(read here only). Tests run on Redis; those marked ``tests.brokers.EVERY_BROKER``
run on RabbitMQ too, through the ``broker`` fixture.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
import redis
from hypothesis import HealthCheck, settings

from evalfleet.core.metric import load_registry
from evalfleet.core.settings import Settings
from evalfleet.judgesim import RunningSim, SimConfig, start_in_thread
from evalfleet.store import SqliteStore, SqlStore, VerdictStore, migrate, open_store
from evalfleet.store.schema import metadata
from testkit.judge_server import ensure_built
from tests.brokers import DELAY_QUEUES, purge
from tests.helpers import WorkerProcess

# Property tests check values, not speed: Hypothesis's per-example deadline (200 ms) and its
# too-slow health check failed test_serializer's property at a load average of 20.
settings.register_profile("evalfleet", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("evalfleet")

POSTGRES_ADMIN_URL = os.environ.get("EVALFLEET_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_SERVER_URL = os.environ.get("EVALFLEET_TEST_REDIS", "redis://127.0.0.1:6379")
RABBITMQ_SERVER_URL = os.environ.get("EVALFLEET_TEST_RABBITMQ",
                                     "amqp://guest:guest@127.0.0.1:5672")

#: Metric queues tests publish to besides the built-in ones (metrics added as files).
_TEST_METRICS = ("tone", "broken")

#: Key that marks a Redis database as taken by a running test session.
_REDIS_LOCK = "evalfleet-test-session"

#: Seconds a test database's drop may wait before the database is left to a later session.
_DROP_TIMEOUT_S = 60

#: Names of the databases :func:`new_database` makes; group 1 is the test process's id.
_TEST_DATABASE_NAME = r"evalfleet_(?:test|empty)_([0-9]+)_[0-9a-f]{6}"

#: Environment variables that would leak the developer's configuration into tests.
_CONFIG_PREFIXES = ("EVALFLEET_", "OPENAI_")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "real_judge: runs against the real judge server "
                            "(testkit/judge_server.py)")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build the real judge server before any test when a collected test needs it and this
    machine has not built it yet (many minutes, once per machine; outside test timeouts)."""
    if any(item.get_closest_marker("real_judge") for item in session.items):
        ensure_built()


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Strip evalfleet and OpenAI settings from the environment, and run in a temp dir."""
    for name in list(os.environ):
        if name.startswith(_CONFIG_PREFIXES) and not name.startswith("EVALFLEET_TEST_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # so no stray .env file is read


@contextmanager
def new_database(prefix: str) -> Iterator[str]:
    """An empty Postgres database of its own (no schema), dropped on leaving.

    Yields:
        Its SQLAlchemy URL.
    """
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    base = POSTGRES_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")
    try:
        yield f"{base}/{name}"
    finally:
        _drop_database(name)


def _drop_database(name: str) -> bool:
    """Drop a test database, waiting at most ``_DROP_TIMEOUT_S``; warn when it stays.

    PostgreSQL's DROP DATABASE waits until every backend of the whole server has closed
    its files of the database (a ProcSignalBarrier), and a backend waiting on its client
    in the middle of a ``COPY FROM STDIN`` does not answer until the copy ends: a bench
    of another checkout on the shared server held one open for eight minutes, and this
    drop, unbounded, took the last test past its 300 s timeout. A database left behind
    is dropped by a later session (:func:`_drop_abandoned_databases`).

    Returns:
        Whether the database is gone.
    """
    try:
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f"SET statement_timeout = '{_DROP_TIMEOUT_S}s'")
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    except psycopg.errors.QueryCanceled:
        warnings.warn(f"test database {name} left behind: its drop waited {_DROP_TIMEOUT_S} s "
                      "on another backend of the server; a later test session drops it",
                      stacklevel=1)
        return False
    return True


def _drop_abandoned_databases() -> None:
    """Drop the test databases of this machine's test processes that are gone (killed
    runs, and drops that :func:`_drop_database` gave up on). Only on a server of this
    machine, where the process id in a database's name is one of its processes."""
    if urlsplit(POSTGRES_ADMIN_URL).hostname not in ("127.0.0.1", "localhost", "::1", None):
        return
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
        names = [row[0] for row in admin.execute("SELECT datname FROM pg_database")]
    for name in names:
        match = re.fullmatch(_TEST_DATABASE_NAME, name)
        if match and _gone(int(match[1])) and not _drop_database(name):
            return  # the server holds every drop now: leave the rest to a later session


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh database for this test session, migrated to head."""
    _drop_abandoned_databases()
    with new_database("evalfleet_test") as url:
        store = open_store(url)
        migrate(store.engine)
        store.close()
        with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as conn:
            _MIGRATED_PARTITIONS[url] = _day_partitions(conn)
        yield url


@pytest.fixture
def empty_postgres_url() -> Iterator[str]:
    """A Postgres database of this test's own, with no schema in it."""
    with new_database("evalfleet_empty") as url:
        yield url


@pytest.fixture
def database_url(postgres_url: str) -> str:
    """The session database, emptied for this test."""
    tables = ", ".join(table.name for table in metadata.sorted_tables)
    with psycopg.connect(postgres_url.replace("+psycopg", ""), autocommit=True) as conn:
        conn.execute(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")
    return postgres_url


@pytest.fixture
def migrated_partitions_only(database_url: str) -> str:
    """The session database with only the partitions migrate made: day partitions an
    earlier test made would be this test's expired days (a purge drops each in a
    transaction of its own)."""
    with psycopg.connect(database_url.replace("+psycopg", ""), autocommit=True) as conn:
        for name in _day_partitions(conn) - _MIGRATED_PARTITIONS[database_url]:
            conn.execute(f"DROP TABLE IF EXISTS {name}")
    return database_url


#: The partitions each session database had right after ``migrate``.
_MIGRATED_PARTITIONS: dict[str, set[str]] = {}


def _day_partitions(conn: psycopg.Connection[Any]) -> set[str]:
    """The partitions of the verdict tables (none on a store that is not partitioned)."""
    rows = conn.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent::regclass::text = ANY(%s)",
        (["verdicts", "verdict_scores", "verdict_samples"],)).fetchall()
    return {name for (name,) in rows}


@pytest.fixture
def store(database_url: str) -> Iterator[VerdictStore]:
    """A Postgres verdict store on the emptied test database."""
    verdict_store = open_store(database_url)
    yield verdict_store
    verdict_store.close()


@pytest.fixture(params=["postgres", "sqlite"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlStore]:
    """Each test that asks for it runs against Postgres and against the embedded SQLite."""
    if request.param == "postgres":
        yield request.getfixturevalue("store")
        return
    sqlite = SqliteStore(f"sqlite:///{tmp_path / 'verdicts.db'}")
    migrate(sqlite.engine)
    yield sqlite
    sqlite.close()


@pytest.fixture(scope="session")
def redis_session_url() -> Iterator[str]:
    """A Redis database of its own for this test session (sessions may run side by side)."""
    session = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
    for db in range(1, 16):
        client = redis.Redis.from_url(f"{REDIS_SERVER_URL}/{db}")
        if client.set(_REDIS_LOCK, session, nx=True, ex=6 * 3600) or _take_over(client, session):
            yield f"{REDIS_SERVER_URL}/{db}"
            client.flushdb()
            return
    raise RuntimeError("every Redis database 1-15 is taken by another test session")


def _take_over(client: redis.Redis, session: str) -> bool:
    """Take the database of a session that was a process of this machine that is gone (a
    killed test run leaves its lock behind for its six hours otherwise).

    Only if the lock still names that session when it is taken: the test processes of one
    run start together, and two that both found the same dead holder both took its
    database, each flushing the other's queues and taking the other's jobs.
    """
    with client.pipeline() as pipe:
        try:
            pipe.watch(_REDIS_LOCK)
            raw = pipe.get(_REDIS_LOCK) or b""
            if not _abandoned(raw.decode(errors="replace") if isinstance(raw, bytes) else raw):
                return False
            pipe.multi()
            pipe.set(_REDIS_LOCK, session, ex=6 * 3600)
            pipe.execute()
        except redis.WatchError:  # another session took it first
            return False
    return True


def _abandoned(holder: str) -> bool:
    """Whether the session ``holder`` names was a process of this machine that is gone."""
    host, _, rest = holder.partition(":")
    pid = rest.partition(":")[0]
    return holder.count(":") == 2 and host == socket.gethostname() and pid.isdigit() \
        and _gone(int(pid))


def _gone(pid: int) -> bool:
    """Whether no process of this machine has this id."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


@pytest.fixture
def redis_url(redis_session_url: str) -> str:
    """This session's Redis database, flushed for this test."""
    client = redis.Redis.from_url(redis_session_url)
    session = client.get(_REDIS_LOCK)
    # One transaction: between a flush and the lock's return, a session starting would
    # find this database free and take it too.
    with client.pipeline(transaction=True) as pipe:
        pipe.flushdb()
        pipe.set(_REDIS_LOCK, session or b"", ex=6 * 3600)
        pipe.execute()
    return redis_session_url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A client on this test's Redis database."""
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture(scope="session")
def rabbitmq_session_url() -> Iterator[str]:
    """A RabbitMQ virtual host of its own for this test session (sessions may run side
    by side), made with ``rabbitmqctl`` when it is at hand; else the server's default
    virtual host, emptied per test all the same."""
    vhost = f"evalfleet_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    user = urlsplit(RABBITMQ_SERVER_URL).username or "guest"
    if _rabbitmqctl("add_vhost", vhost) and _rabbitmqctl(
            "set_permissions", "-p", vhost, user, ".*", ".*", ".*"):
        yield f"{RABBITMQ_SERVER_URL}/{vhost}"
        _rabbitmqctl("delete_vhost", vhost)
        return
    warnings.warn("rabbitmqctl unavailable: RabbitMQ tests share the default virtual host",
                  stacklevel=1)
    yield f"{RABBITMQ_SERVER_URL}//"


def _rabbitmqctl(*args: str) -> bool:
    if shutil.which("rabbitmqctl") is None:
        return False
    result = subprocess.run(["rabbitmqctl", *args], capture_output=True, timeout=60,
                            check=False)
    return result.returncode == 0


@pytest.fixture
def rabbitmq_url(rabbitmq_session_url: str) -> str:
    """This session's RabbitMQ virtual host, its metric, dead-letter and delay queues
    emptied for this test (a missing server fails here)."""
    metrics = [*load_registry().names(), *_TEST_METRICS]
    purge(rabbitmq_session_url, [*(f"eval.{name}" for name in metrics), "eval.dead",
                                 *DELAY_QUEUES])
    return rabbitmq_session_url


@pytest.fixture
def broker(request: pytest.FixtureRequest) -> str:
    """The broker this test runs on: ``redis``, unless parametrised (``EVERY_BROKER``)."""
    return str(getattr(request, "param", "redis"))


@pytest.fixture
def broker_url(broker: str, request: pytest.FixtureRequest) -> str:
    """The URL of this test's broker, emptied for the test."""
    if broker == "redis":
        return str(request.getfixturevalue("redis_url"))
    assert broker == "rabbitmq", broker
    return str(request.getfixturevalue("rabbitmq_url"))


@pytest.fixture(scope="session")
def sim_session() -> Iterator[RunningSim]:
    """One judge simulator for the session (fast replies, no faults)."""
    sim = start_in_thread(SimConfig.build({"latency_ms": 5}))
    yield sim
    sim.stop()


@pytest.fixture
def sim(sim_session: RunningSim) -> Iterator[RunningSim]:
    """The session simulator with counters, scripts and faults reset for this test."""
    sim_session.reset()
    yield sim_session
    sim_session.reset()
    sim_session.configure(**SimConfig.build({"latency_ms": 5}).as_json())


@pytest.fixture
def settings(database_url: str, broker_url: str, sim: RunningSim, tmp_path: Path) -> Settings:
    """Settings pointing at the test services, with short retry and recovery times."""
    return Settings(
        database_url=database_url, broker_url=broker_url, openai_base_url=sim.base_url,
        data_dir=tmp_path / "data", judge_timeout_s=2, retry_base_s=0.2, retry_max_s=2.0,
        visibility_timeout_s=7, claim_lease_s=30, worker_concurrency=8,
    )


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start ``evalfleet worker`` processes; all are stopped at teardown."""
    started: list[WorkerProcess] = []

    def start(settings: Settings, *, queues: list[str], concurrency: int = 8) -> WorkerProcess:
        worker = WorkerProcess(settings, queues=queues, concurrency=concurrency,
                               log_path=tmp_path / f"worker-{len(started)}.log")
        started.append(worker)
        worker.wait_ready()
        return worker

    yield start
    for worker in started:
        worker.stop()
