"""Redis and PostgreSQL servers a chaos run owns, on free ports, so it may kill them.

The shared services on the standard ports belong to everyone's tests and are never
touched here. Each server is a child process of the run, started with the same
directory every time, so a restart finds the data the last one left: Redis replays
its append-only file, Postgres its data directory. :meth:`close` must run in a
``finally`` (the fixtures and ``bench/chaos.py`` do so).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import redis

from evalfleet.store import migrate, open_store

#: Where the PostgreSQL binaries live (Debian layout); the newest version is used.
POSTGRES_BIN_GLOB = "/usr/lib/postgresql/*/bin"

#: Seconds a server gets to accept connections after a start.
START_TIMEOUT_S = 30.0

#: Seconds a server gets to exit after a stop signal before it is killed.
STOP_TIMEOUT_S = 30.0


class ServiceFailed(RuntimeError):
    """A chaos service did not start or stop as asked."""


def free_port() -> int:
    """A TCP port nothing listens on right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for(ready: Callable[[], object], *, process: subprocess.Popen[bytes], what: str,
              log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServiceFailed(f"{what} exited with {process.returncode}: "
                                f"{log.read_text(errors='replace')[-2000:]}")
        try:
            if ready():
                return
        except Exception:  # not up yet; the deadline decides
            pass
        time.sleep(0.05)
    raise ServiceFailed(f"{what} did not accept connections within {START_TIMEOUT_S:g} s")


def _end(process: subprocess.Popen[bytes] | None, sig: int) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(sig)
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class RedisServer:
    """A ``redis-server`` with AOF on (``appendfsync always``) in a directory of its own.

    ``always``, because the chaos runs check that no job a producer published is lost when
    Redis is killed: with ``everysec`` Redis may answer a write it has not yet handed to
    the file (it postpones the write up to 2 s while a slow fsync runs), and a ``kill -9``
    then loses it; a loaded machine's disk made that happen once (12 jobs).
    """

    def __init__(self, directory: Path, *, port: int | None = None) -> None:
        self.directory = directory
        self.port = port or free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The broker URL of database 0."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server (again) on the same port and directory; wait until it answers.

        Raises:
            ServiceFailed: When it exits or does not answer in time.
        """
        log = self.directory / "redis.log"
        with log.open("ab") as out:
            self._process = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                 "--dir", str(self.directory), "--appendonly", "yes",
                 "--appendfsync", "always", "--save", "", "--daemonize", "no"],
                stdout=out, stderr=subprocess.STDOUT)
        client = redis.Redis(port=self.port, socket_timeout=1)
        try:
            _wait_for(lambda: client.ping() and not client.info("persistence")["loading"],
                      process=self._process, what="redis-server", log=log)
        finally:
            client.close()

    def kill(self) -> None:
        """SIGKILL the server: no shutdown, no final AOF rewrite."""
        _end(self._process, signal.SIGKILL)

    def restart(self) -> None:
        """Kill it and start it again; the AOF brings back what was written."""
        self.kill()
        self.start()

    def client(self) -> redis.Redis:
        """A client of database 0."""
        return redis.Redis(port=self.port, socket_timeout=5)

    def close(self) -> None:
        """Stop the server and remove its directory."""
        _end(self._process, signal.SIGKILL)
        shutil.rmtree(self.directory, ignore_errors=True)


class PostgresCluster:
    """A PostgreSQL cluster of its own: ``initdb`` once, then the postmaster as a child.

    Run as root, the server runs as the ``postgres`` user (it refuses root), and the
    directory is handed to that user.
    """

    def __init__(self, directory: Path, *, port: int | None = None) -> None:
        self.directory = directory
        self.port = port or free_port()
        self._bin = _postgres_bin()
        self._process: subprocess.Popen[bytes] | None = None
        self._user = "postgres" if os.geteuid() == 0 else None

    @property
    def admin_url(self) -> str:
        """libpq URL of the ``postgres`` database."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def init(self) -> None:
        """Create the cluster (trust auth, user ``postgres``) and start it."""
        if self._user is not None:
            shutil.chown(self.directory, self._user, self._user)
        subprocess.run(
            [str(self._bin / "initdb"), "-D", str(self.directory / "data"), "-U", "postgres",
             "--auth=trust", "-E", "UTF8", "--no-sync"],
            check=True, capture_output=True, user=self._user, group=self._user)
        self.start()

    def start(self) -> None:
        """Start the postmaster on the same port and data directory; wait until it answers.

        Raises:
            ServiceFailed: When it exits or does not answer in time.
        """
        log = self.directory / "postgres.log"
        with log.open("ab") as out:
            self._process = subprocess.Popen(
                [str(self._bin / "postgres"), "-D", str(self.directory / "data"),
                 "-p", str(self.port), "-k", str(self.directory),
                 "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200"],
                stdout=out, stderr=subprocess.STDOUT, user=self._user, group=self._user)
        _wait_for(self._answers, process=self._process, what="postgres", log=log)

    def _answers(self) -> bool:
        with psycopg.connect(self.admin_url, connect_timeout=1) as conn:
            return conn.execute("SELECT 1").fetchone() is not None

    def stop(self) -> None:
        """Fast shutdown (what ``pg_ctl stop -m fast`` does): sessions end, data stays."""
        _end(self._process, signal.SIGINT)

    def create_database(self, name: str) -> str:
        """A new, migrated database (dropped first if it exists); its SQLAlchemy URL."""
        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{name}"')
        url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"
        store = open_store(url)
        try:
            migrate(store.engine)
        finally:
            store.close()
        return url

    def close(self) -> None:
        """Stop the server and remove the cluster."""
        _end(self._process, signal.SIGINT)
        shutil.rmtree(self.directory, ignore_errors=True)


def _postgres_bin() -> Path:
    found = sorted(Path("/").glob(POSTGRES_BIN_GLOB.lstrip("/")),
                   key=lambda path: int(path.parent.name) if path.parent.name.isdigit() else 0)
    if not found:
        raise ServiceFailed(f"no PostgreSQL binaries under {POSTGRES_BIN_GLOB}")
    return found[-1]


class ChaosServices:
    """One Redis and one Postgres cluster for a series of chaos runs."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="evalfleet-chaos-"))
        os.chmod(self.root, 0o755)  # the postgres user must reach its directory
        (self.root / "redis").mkdir()
        (self.root / "pg").mkdir()
        self.redis = RedisServer(self.root / "redis")
        self.postgres = PostgresCluster(self.root / "pg")

    def start(self) -> ChaosServices:
        """Start both; on failure whatever started is stopped again."""
        try:
            self.redis.start()
            self.postgres.init()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Stop both and remove their files."""
        try:
            self.redis.close()
        finally:
            self.postgres.close()
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> ChaosServices:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()
