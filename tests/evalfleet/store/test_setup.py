"""The store's answers about a database setup: URLs shown without passwords, the file a
SQLite URL names, and which errors mean a bad setup rather than a bug."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import IntegrityError, NoSuchModuleError, OperationalError

from evalfleet.core.errors import StoreUnavailable
from evalfleet.store.setup import (
    SetupProblem,
    describe_url,
    missing_table,
    setup_problem,
    sqlite_file,
)


def test_a_url_is_shown_without_its_password() -> None:
    shown = describe_url("postgresql+psycopg://evalfleet:pw-secret@db:5432/fleet")
    assert "pw-secret" not in shown and "db:5432/fleet" in shown
    assert describe_url("") == "(not set)"
    # Not a URL at all: only what follows an ``@`` is shown.
    assert describe_url("nonsense:pw-secret@host") == "host"


@pytest.mark.parametrize(("url", "expected"), [
    ("sqlite:///fleet.db", "fleet.db"),
    ("sqlite:////var/lib/fleet.db", "/var/lib/fleet.db"),
    ("sqlite://", None),
    ("sqlite:///:memory:", None),
    ("postgresql+psycopg://u@h/fleet", None),
])
def test_a_sqlite_url_names_its_file(url: str, expected: str | None) -> None:
    assert sqlite_file(url) == expected


def test_unsupported_and_unreachable_databases_are_setup_problems() -> None:
    with pytest.raises(NoSuchModuleError) as unknown:
        create_engine("nosuchdb://u@h/x")
    assert setup_problem(unknown.value) is SetupProblem.UNSUPPORTED
    assert setup_problem(StoreUnavailable("down")) is SetupProblem.UNREACHABLE
    assert setup_problem(ValueError("a bug")) is None


def test_a_missing_table_is_named_and_a_constraint_error_is_a_bug(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'x.db'}")
    with engine.begin() as conn, pytest.raises(OperationalError) as missing:
        conn.execute(text("SELECT * FROM verdicts"))
    assert missing_table(missing.value) == "table verdicts"
    assert setup_problem(missing.value) is SetupProblem.UNREACHABLE
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY)"))
        conn.execute(text("INSERT INTO t VALUES (1)"))
        with pytest.raises(IntegrityError) as duplicate:
            conn.execute(text("INSERT INTO t VALUES (1)"))
    assert setup_problem(duplicate.value) is None
    assert missing_table(duplicate.value) is None
    engine.dispose()
