"""What differs between the store's two databases, for code that writes SQL of its own.

The alert engine and the pages run on PostgreSQL and on the embedded SQLite file;
both support ``INSERT ... ON CONFLICT`` and ``RETURNING`` (SQLite 3.35 or newer),
through each dialect's own INSERT construct.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine


def is_sqlite(bind: Connection | Engine) -> bool:
    """True when ``bind`` talks to SQLite."""
    return bind.dialect.name == "sqlite"


def upsert(bind: Connection | Engine, table: Table) -> Any:
    """The INSERT construct of ``bind``'s dialect (it carries ``on_conflict_*``)."""
    return (sqlite.insert if is_sqlite(bind) else postgresql.insert)(table)
