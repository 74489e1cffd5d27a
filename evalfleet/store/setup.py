"""The database setup as the command line explains it: a URL shown without its
password, the file a SQLite URL names, and which SQLAlchemy errors mean a bad setup.

SQLAlchemy's URL parser and exception classes are read here and nowhere outside the
store; ``evalfleet.cli.boundary`` turns the answers into one line for the operator.
"""

from __future__ import annotations

import enum
import traceback

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, InterfaceError, NoSuchModuleError, OperationalError

from evalfleet.core.errors import StoreUnavailable


class SetupProblem(enum.Enum):
    """What is wrong with the database setup."""

    UNSUPPORTED = "unsupported"
    """The URL names no database evalfleet supports (or is no URL)."""
    UNREACHABLE = "unreachable"
    """The server refused the connection, the login, or has no such database."""


def describe_url(url: str) -> str:
    """``url`` as shown to an operator: without its password (``(not set)`` when blank)."""
    if not url:
        return "(not set)"
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url.split("@")[-1] if "@" in url else url


def sqlite_file(url: str) -> str | None:
    """The file a ``sqlite`` URL names; None for another database or an in-memory one."""
    if not url.startswith("sqlite"):
        return None
    path = make_url(url).database
    return path if path and path != ":memory:" else None


def setup_problem(error: BaseException) -> SetupProblem | None:
    """Whether ``error`` (one link of a raised chain) means a bad database setup.

    An ``IntegrityError`` or a ``ProgrammingError`` is a bug, not the setup: None.
    """
    if isinstance(error, NoSuchModuleError | ArgumentError) or (
            isinstance(error, ModuleNotFoundError) and _raised_in_sqlalchemy(error)):
        return SetupProblem.UNSUPPORTED
    if isinstance(error, StoreUnavailable | OperationalError | InterfaceError):
        return SetupProblem.UNREACHABLE
    return None


def missing_table(error: BaseException) -> str | None:
    """The table a query found missing (SQLite and Postgres wording), else None."""
    orig = getattr(error, "orig", None)  # only SQLAlchemy's wrapped driver errors
    if orig is None:
        return None
    text = str(orig)
    for marker in ("no such table: ", "relation \""):
        if marker in text and (marker != "relation \"" or "does not exist" in text):
            rest = text.split(marker, 1)[1]
            return "table " + rest.split("\"")[0].split()[0].strip("\"")
    return None


def _raised_in_sqlalchemy(error: BaseException) -> bool:
    """Whether SQLAlchemy raised ``error`` (loading a dialect's driver)."""
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and "/sqlalchemy/" in frames[-1].filename.replace("\\", "/")
