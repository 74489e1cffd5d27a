"""A bad setup ends every command with one line, exit status 2 and no traceback.

The commands run for real (click's runner in-process, and the console script in a
subprocess) against a fresh SQLite file, a fresh Postgres database without the schema,
ports nobody listens on and URLs with schemes nobody supports.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from evalfleet.cli import main
from evalfleet.cli.boundary import explain
from tests.conftest import POSTGRES_ADMIN_URL


def run(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def assert_one_line(result: Result, *expected: str) -> str:
    """Exit 2, no traceback, and an error line holding every ``expected`` text."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, result.stderr
    for text in expected:
        assert text in errors[0], errors[0]
    return errors[0]


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def sqlite_env(tmp_path: Path) -> dict[str, str]:
    """Settings on a SQLite file that exists but was never migrated (a missing file is
    test_consistency's case)."""
    (tmp_path / "fresh.db").touch()
    return {"EVALFLEET_DATABASE_URL": f"sqlite:///{tmp_path / 'fresh.db'}",
            "EVALFLEET_DATA_DIR": str(tmp_path / "data")}


@pytest.mark.parametrize("args", [
    ["export"], ["cost"], ["status", "--sample", "0"], ["alerts", "list"],
    ["dead-letters", "list"], ["worker", "--queues", "rag_qa"],
])
def test_no_schema_in_sqlite_says_to_migrate(sqlite_env: dict[str, str], args: list[str]) -> None:
    line = assert_one_line(run(sqlite_env, *args), "no evalfleet schema",
                           "run `evalfleet migrate`")
    assert "fresh.db" in line


@pytest.mark.parametrize("args", [["export"], ["alerts", "check"], ["beat"],
                                  ["worker", "--queues", "rag_qa"]])
def test_no_schema_in_postgres_says_to_migrate(empty_postgres_url: str, redis_url: str,
                                               args: list[str]) -> None:
    env = {"EVALFLEET_DATABASE_URL": empty_postgres_url, "EVALFLEET_BROKER_URL": redis_url}
    assert_one_line(run(env, *args), "no evalfleet schema", "run `evalfleet migrate`")


def test_after_migrate_the_same_command_works(sqlite_env: dict[str, str]) -> None:
    assert run(sqlite_env, "export").exit_code == 2
    assert run(sqlite_env, "migrate").exit_code == 0
    result = run(sqlite_env, "export")
    assert result.exit_code == 0 and result.stdout == ""


@pytest.mark.parametrize("args", [["migrate"], ["export"], ["cost"]])
def test_unreachable_database_hides_its_password(args: list[str]) -> None:
    url = f"postgresql+psycopg://evalfleet:hunter2secret@127.0.0.1:{closed_port()}/evalfleet"
    line = assert_one_line(run({"EVALFLEET_DATABASE_URL": url}, *args),
                           "cannot use the database", "Connection refused",
                           "check EVALFLEET_DATABASE_URL")
    assert "hunter2secret" not in line


def test_missing_postgres_database_is_named() -> None:
    base = POSTGRES_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")
    url = f"{base}/evalfleet_absent_{uuid.uuid4().hex[:8]}"
    assert_one_line(run({"EVALFLEET_DATABASE_URL": url}, "export"), "does not exist")


@pytest.mark.parametrize("url", ["foo://host/db", "mysql://user@host/db", "not a url"])
def test_unsupported_database_url(url: str) -> None:
    assert_one_line(run({"EVALFLEET_DATABASE_URL": url}, "export"),
                    "EVALFLEET_DATABASE_URL", "postgresql+psycopg://")


def test_unsupported_broker_url(sqlite_env: dict[str, str], tmp_path: Path) -> None:
    samples = tmp_path / "s.jsonl"
    samples.write_text('{"id": "a", "input": "q", "output": "a"}\n')
    env = {**sqlite_env, "EVALFLEET_BROKER_URL": "kafka://host:9092"}
    assert_one_line(run(env, "produce", str(samples), "--metric", "rag_qa"),
                    "EVALFLEET_BROKER_URL", "redis://", "amqp://")


def test_unreachable_broker_is_one_line(sqlite_env: dict[str, str], tmp_path: Path) -> None:
    samples = tmp_path / "s.jsonl"
    samples.write_text('{"id": "a", "input": "q", "output": "a"}\n')
    env = {**sqlite_env, "EVALFLEET_BROKER_URL": f"redis://127.0.0.1:{closed_port()}/0"}
    assert_one_line(run(env, "produce", str(samples), "--metric", "rag_qa"),
                    "cannot reach the broker", "Connection refused", "EVALFLEET_BROKER_URL")


def test_unreachable_rabbitmq_is_one_line(sqlite_env: dict[str, str], tmp_path: Path) -> None:
    samples = tmp_path / "s.jsonl"
    samples.write_text('{"id": "a", "input": "q", "output": "a"}\n')
    url = f"amqp://guest:pw-secret@127.0.0.1:{closed_port()}//"
    line = assert_one_line(run({**sqlite_env, "EVALFLEET_BROKER_URL": url}, "produce",
                               str(samples), "--metric", "rag_qa"), "cannot reach the broker")
    assert "pw-secret" not in line


@pytest.mark.parametrize(("url", "expected"), [
    ("amqp://guest:not-the-password@127.0.0.1:5672//", "ACCESS_REFUSED"),
    ("amqp://guest:guest@127.0.0.1:5672/evalfleet-no-such-vhost", "vhost"),
])
def test_rabbitmq_refusing_the_login_or_vhost(sqlite_env: dict[str, str], tmp_path: Path,
                                              url: str, expected: str) -> None:
    samples = tmp_path / "s.jsonl"
    samples.write_text('{"id": "a", "input": "q", "output": "a"}\n')
    line = assert_one_line(run({**sqlite_env, "EVALFLEET_BROKER_URL": url}, "produce",
                               str(samples), "--metric", "rag_qa"),
                           "refused the connection", expected, "EVALFLEET_BROKER_URL")
    assert "not-the-password" not in line


@pytest.mark.parametrize("args", [
    ["status", "--metric", "nope", "--sample", "0"], ["worker", "--queues", "nope"],
    ["produce", "-", "--metric", "nope"],
])
def test_unknown_metric(sqlite_env: dict[str, str], args: list[str]) -> None:
    run(sqlite_env, "migrate")
    assert_one_line(run(sqlite_env, *args), "unknown metric 'nope'", "rag_qa")


@pytest.mark.parametrize("value", ["99999999999d", "9" * 40 + "s", "²d", "yesterday"])
def test_bad_times(sqlite_env: dict[str, str], value: str) -> None:
    run(sqlite_env, "migrate")
    assert_one_line(run(sqlite_env, "export", "--since", value), repr(value))


def test_invalid_settings_exit_2() -> None:
    assert_one_line(run({"EVALFLEET_WORKER_CONCURRENCY": "-5"}, "export"),
                    "EVALFLEET_WORKER_CONCURRENCY", "greater than or equal to 1")


def console(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m evalfleet ARGS`` in a child with only ``env`` as its evalfleet settings."""
    base = {key: value for key, value in os.environ.items()
            if not key.startswith(("EVALFLEET_", "OPENAI_"))}
    return subprocess.run([sys.executable, "-m", "evalfleet", *args], env={**base, **env},
                          cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def test_console_script_no_schema_and_debug_traceback(sqlite_env: dict[str, str],
                                                      tmp_path: Path) -> None:
    quiet = console(sqlite_env, "status", "--sample", "0", cwd=tmp_path)
    assert quiet.returncode == 2, quiet.stderr
    assert quiet.stderr.strip().splitlines() == [
        f"Error: the database {sqlite_env['EVALFLEET_DATABASE_URL']} has no evalfleet "
        "schema (table verdicts); run `evalfleet migrate`"]
    debug = console(sqlite_env, "--log-level", "debug", "status", "--sample", "0",
                    cwd=tmp_path)
    assert debug.returncode == 2
    assert "Traceback (most recent call last)" in debug.stderr
    assert debug.stderr.strip().splitlines()[-1] == quiet.stderr.strip()


def test_bad_rules_file_is_one_line(postgres_url: str, tmp_path: Path) -> None:
    bad = tmp_path / "rules.yml"
    bad.write_text("rules: [")
    result = console({"EVALFLEET_ALERT_RULES_FILE": str(bad),
                      "EVALFLEET_DATABASE_URL": postgres_url}, "alerts", "check", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert str(bad) in result.stderr


@pytest.mark.parametrize("exc", [RuntimeError("boom"), ZeroDivisionError(), KeyError("x"),
                                 ValueError("no")])
def test_other_failures_are_not_setup_errors(exc: Exception) -> None:
    assert explain(exc, database_url="sqlite:///x.db", broker_url="redis://h/0") is None


def raised(call: Callable[[], object]) -> BaseException:
    try:
        call()
    except Exception as exc:
        return exc
    raise AssertionError("expected the call to fail")


def test_unreachable_redis_and_rabbitmq_are_explained() -> None:
    import redis
    from kombu import Connection

    port = closed_port()
    from_redis = raised(lambda: redis.Redis(port=port, socket_connect_timeout=2).ping())
    line = explain(from_redis, broker_url=f"redis://:pw-secret@127.0.0.1:{port}/0")
    assert line is not None and "cannot reach the broker" in line
    assert "pw-secret" not in line and "Connection refused" in line
    amqp_url = f"amqp://guest:pw-secret@127.0.0.1:{port}//"
    from_amqp = raised(lambda: Connection(amqp_url, connect_timeout=2).ensure_connection(
        max_retries=0))
    line = explain(from_amqp, broker_url=amqp_url)
    assert line is not None and "cannot reach the broker" in line and "pw-secret" not in line


def test_a_database_bug_is_not_a_setup_error(tmp_path: Path) -> None:
    import sqlalchemy

    engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 'x.db'}")
    with engine.begin() as connection:
        connection.execute(sqlalchemy.text("CREATE TABLE t (id INTEGER PRIMARY KEY)"))
        connection.execute(sqlalchemy.text("INSERT INTO t VALUES (1)"))
    with engine.begin() as connection:
        duplicate = raised(lambda: connection.execute(sqlalchemy.text("INSERT INTO t VALUES (1)")))
    assert explain(duplicate, database_url=str(engine.url)) is None
