"""The production verdict store: PostgreSQL through psycopg 3."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table, create_engine, func
from sqlalchemy.dialects.postgresql import insert

from workers.store.sql import SqlStore


class PostgresStore(SqlStore):
    """Verdicts in PostgreSQL; ``ON CONFLICT`` keeps them exactly once."""

    def __init__(self, url: str, *, pool_size: int = 10) -> None:
        engine = create_engine(
            _with_psycopg(url), pool_size=pool_size, max_overflow=4,
            pool_pre_ping=True, pool_recycle=1800,
        )
        super().__init__(engine)

    def day_of(self, column: Any) -> Any:
        """The UTC day of a ``timestamptz`` column, whatever the session's time zone."""
        return func.date(func.timezone("UTC", column))

    def seconds_between(self, later: Any, earlier: Any) -> Any:
        """``later - earlier`` in seconds, from the interval's epoch."""
        return func.extract("epoch", later - earlier)

    def insert(self, table: Table) -> Any:
        """PostgreSQL's INSERT, with ``on_conflict_do_nothing`` / ``_do_update``."""
        return insert(table)


def _with_psycopg(url: str) -> str:
    """Use psycopg 3 for plain ``postgresql://`` URLs (SQLAlchemy would pick psycopg2)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url
