"""CI stage: install evalfleet as the Dockerfile does and run a fleet with nothing else.

Builds the wheel from the checkout, installs the lock (``requirements.lock``, hashes
checked) and then the wheel without extras into a fresh virtual environment, and with
that environment only runs ``evalfleet migrate``, ``judge-sim``, a worker, ``produce``
and ``export`` against Postgres, on Redis and on RabbitMQ. A runtime dependency the lock
or ``pyproject.toml`` misses fails here (``pip check``, or the fleet itself).

Uses a fresh Postgres database, a Redis database no one else holds (the test sessions'
lock key) and a RabbitMQ virtual host of its own, and removes them at the end. Every
wait is bounded. Runs with the standard library only: ``python3 .ci/production_install.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
POSTGRES = "postgresql://postgres@127.0.0.1:5432"
REDIS = "redis://127.0.0.1:6379"
RABBITMQ = "amqp://guest:guest@127.0.0.1:5672"
#: The key a test session sets in the Redis database it holds (tests/conftest.py).
REDIS_LOCK = "evalfleet-test-session"
#: Samples judged per broker.
SAMPLES = 20
#: Longest wait for any one step, in seconds.
WAIT_S = 120.0


def main() -> int:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="evalfleet-prod-") as tmp:
        work = Path(tmp)
        evalfleet = install(work)
        print(f"installed in {time.monotonic() - started:.1f} s")
        with database() as database_url, redis_db() as redis_url, vhost() as amqp_url:
            run(work, evalfleet, "migrate", env=environment(work, database_url, redis_url))
            for name, broker_url in (("redis", redis_url), ("rabbitmq", amqp_url)):
                begun = time.monotonic()
                env = environment(work, database_url, broker_url, shared_redis_url=redis_url)
                judge_samples(work, evalfleet, env, prefix=f"prod-{name}-")
                print(f"{name}: {SAMPLES} samples judged in {time.monotonic() - begun:.1f} s")
    print(f"production install stage: {time.monotonic() - started:.1f} s")
    return 0


def install(work: Path) -> Path:
    """A fresh venv with the lock and the wheel built from the checkout; its ``evalfleet``."""
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--quiet", "--disable-pip-version-check",
           "--isolated"]  # the machine's pip config (extra indexes, constraints) is not the image's
    subprocess.run([*pip, "install", "--require-hashes", "--no-deps", "-r",
                    str(ROOT / "requirements.lock")], check=True)
    dist = work / "dist"
    subprocess.run([*pip, "wheel", "--no-deps", "--wheel-dir", str(dist), str(ROOT)],
                   check=True, cwd=work)
    wheels = list(dist.glob("evalfleet-*.whl"))
    assert len(wheels) == 1, wheels
    subprocess.run([*pip, "install", "--no-deps", str(wheels[0])], check=True)
    subprocess.run([*pip, "check"], check=True)
    return venv / "bin" / "evalfleet"


def environment(work: Path, database_url: str, broker_url: str,
                shared_redis_url: str | None = None) -> dict[str, str]:
    """The process environment without the caller's evalfleet settings, plus these."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("EVALFLEET_", "OPENAI_", "VIRTUAL_ENV", "PYTHON"))}
    env["PATH"] = os.pathsep.join(part for part in env.get("PATH", "").split(os.pathsep)
                                  if "venv" not in part)
    env.update(EVALFLEET_DATABASE_URL=database_url, EVALFLEET_BROKER_URL=broker_url,
               EVALFLEET_DATA_DIR=str(work / "data"), OPENAI_API_KEY="sim",
               EVALFLEET_JUDGE_MODEL="sim-judge")
    if shared_redis_url:
        env["EVALFLEET_SHARED_REDIS_URL"] = shared_redis_url
    return env


def judge_samples(work: Path, evalfleet: Path, env: dict[str, str], *, prefix: str) -> None:
    """Judge SAMPLES rag_qa samples through a worker and the simulator; check the export."""
    port = free_port()
    env = {**env, "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1"}
    samples = write_samples(work / f"{prefix}samples.jsonl", prefix=prefix)
    with spawn(work, evalfleet, ["judge-sim", "--port", str(port), "--latency-ms", "5"],
               env=env, name=f"{prefix}judge-sim") as sim:
        wait_for(lambda: port_open(port), what="judge-sim listening", child=sim)
        with spawn(work, evalfleet, ["worker", "--queues", "rag_qa", "--concurrency", "8"],
                   env=env, name=f"{prefix}worker") as worker:
            wait_for(lambda: b" ready." in worker.log.read_bytes(), what="worker ready",
                     child=worker)
            run(work, evalfleet, "produce", str(samples), "--metric", "rag_qa",
                "--sample-rate", "1", env=env)
            wait_for(lambda: len(exported(work, evalfleet, env, prefix)) >= SAMPLES,
                     what=f"{SAMPLES} verdicts exported", child=worker)
    verdicts = exported(work, evalfleet, env, prefix)
    assert len(verdicts) == SAMPLES, len(verdicts)
    bad = [v for v in verdicts if v["status"] != "ok" or v["scores"].get("faithfulness") is None]
    assert not bad, bad[:2]


def write_samples(path: Path, *, prefix: str) -> Path:
    """SAMPLES demo samples with ids of their own."""
    lines = (ROOT / "evalfleet" / "demo" / "samples.jsonl").read_text().splitlines()[:SAMPLES]
    with path.open("w") as out:
        for line in lines:
            sample = json.loads(line)
            sample["id"] = prefix + sample["id"]
            out.write(json.dumps(sample) + "\n")
    return path


def exported(work: Path, evalfleet: Path, env: dict[str, str], prefix: str) -> list[dict]:
    out = run(work, evalfleet, "export", "--metric", "rag_qa", env=env, quiet=True)
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    return [row for row in rows if row["sample_id"].startswith(prefix)]


def run(work: Path, evalfleet: Path, *args: str, env: dict[str, str], quiet: bool = False) -> str:
    """Run one evalfleet command to completion; fail with its output if it fails."""
    result = subprocess.run([str(evalfleet), *args], cwd=work, env=env, capture_output=True,
                            text=True, timeout=WAIT_S, check=False)
    if result.returncode != 0:
        sys.exit(f"evalfleet {' '.join(args)} exited {result.returncode}:\n"
                 f"{result.stdout}\n{result.stderr}")
    if not quiet:
        print(f"evalfleet {args[0]}: {(result.stdout + result.stderr).strip()[-300:]}")
    return result.stdout


class Child(NamedTuple):
    """A long-running evalfleet command and the file its output goes to."""

    process: subprocess.Popen[bytes]
    log: Path


@contextmanager
def spawn(work: Path, evalfleet: Path, args: list[str], *, env: dict[str, str],
          name: str) -> Iterator[Child]:
    """A long-running evalfleet command, stopped (SIGTERM, then SIGKILL) on exit."""
    log = work / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen([str(evalfleet), *args], cwd=work, env=env, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield Child(process, log)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def wait_for(condition: Callable[[], bool], *, what: str, child: Child) -> None:
    """Poll ``condition`` for up to WAIT_S; exit with the log if the child dies or time ends."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        exited = child.process.poll()
        if exited is not None or time.monotonic() > deadline:
            why = (f"{child.log.stem} exited {exited}" if exited is not None
                   else f"timed out after {WAIT_S:.0f} s")
            tail = child.log.read_text(errors="replace")[-3000:]
            sys.exit(f"{why} waiting for {what}\n{tail}")
        time.sleep(0.2)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def database() -> Iterator[str]:
    name = f"evalfleet_prod_{uuid.uuid4().hex[:8]}"
    psql(f'CREATE DATABASE "{name}"')
    try:
        yield f"{POSTGRES.replace('postgresql://', 'postgresql+psycopg://')}/{name}"
    finally:
        psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def psql(statement: str) -> None:
    subprocess.run(["psql", f"{POSTGRES}/postgres", "-q", "-v", "ON_ERROR_STOP=1", "-c",
                    statement], check=True, timeout=60)


@contextmanager
def redis_db() -> Iterator[str]:
    """A Redis database 1-15 that no test session holds, held and flushed here."""
    token = f"production-install-{uuid.uuid4().hex}"
    for db in range(1, 16):
        if redis_cli(db, "SET", REDIS_LOCK, token, "NX", "EX", "3600") == "OK":
            try:
                yield f"{REDIS}/{db}"
            finally:
                redis_cli(db, "FLUSHDB")
            return
    sys.exit("every Redis database 1-15 is held by a test session")


def redis_cli(db: int, *args: str) -> str:
    return subprocess.run(["redis-cli", "-u", f"{REDIS}/{db}", *args], capture_output=True,
                          text=True, check=True, timeout=30).stdout.strip()


@contextmanager
def vhost() -> Iterator[str]:
    name = f"evalfleet_prod_{uuid.uuid4().hex[:8]}"
    rabbitmqctl("add_vhost", name)
    try:
        rabbitmqctl("set_permissions", "-p", name, "guest", ".*", ".*", ".*")
        yield f"{RABBITMQ}/{name}"
    finally:
        rabbitmqctl("delete_vhost", name)


def rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", "-q", *args], check=True, timeout=60,
                   stdout=subprocess.DEVNULL)


if __name__ == "__main__":
    if shutil.which("psql") is None:
        sys.exit("psql is needed to create the stage's database")
    sys.exit(main())
