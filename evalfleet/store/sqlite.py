"""The embedded verdict store: one SQLite file, for demos and single-machine use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Table, create_engine, event, func
from sqlalchemy.dialects.sqlite import insert
from sqlalchemy.engine import make_url

from evalfleet.core.review_slice import ReviewSlice
from evalfleet.store.sql import SqlStore

#: How long a writer waits for the file lock before failing, in milliseconds.
BUSY_TIMEOUT_MS = 30_000


class SqliteStore(SqlStore):
    """Verdicts in a SQLite file (WAL mode, one writer at a time)."""

    def __init__(self, url: str, *, review: ReviewSlice | None = None) -> None:
        database = make_url(url).database
        if database and database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False})
        event.listen(engine, "connect", _configure_connection)
        # Take the write lock at BEGIN: a deferred transaction that later needs
        # to write can fail at once with "database is locked" under concurrency.
        event.listen(engine, "begin", lambda conn: conn.exec_driver_sql("BEGIN IMMEDIATE"))
        super().__init__(engine, review=review)

    def day_of(self, column: Any) -> Any:
        """The day of a timestamp column (stored as UTC text)."""
        return func.date(column)

    def seconds_between(self, later: Any, earlier: Any) -> Any:
        """``later - earlier`` in seconds, from Julian days (times are stored as UTC text)."""
        return (func.julianday(later) - func.julianday(earlier)) * 86400.0

    def insert(self, table: Table) -> Any:
        """SQLite's INSERT, with ``on_conflict_do_nothing`` / ``_do_update``."""
        return insert(table)


def _configure_connection(dbapi_connection: Any, _record: Any) -> None:
    # Let SQLAlchemy's "begin" event issue BEGIN instead of the driver.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()
