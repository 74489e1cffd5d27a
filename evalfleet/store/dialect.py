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


def jit_off(conn: Connection) -> None:
    """Switch Postgres's JIT compilation off for the rest of ``conn``'s transaction, once.

    The alert engine's and the pages' statements run in milliseconds, yet a long range's
    row estimate may pass ``jit_above_cost``, and compiling then costs seconds
    (docs/operating.md). ``SET LOCAL`` is a round trip of its own: a transaction that
    reads several windows sends it only before the first (the transaction it was sent in
    is kept on the connection, so a later one sends it again). Nothing on SQLite.
    """
    if is_sqlite(conn):
        return
    transaction = conn.get_transaction()
    if transaction is not None and conn.info.get("jit_off_in") is transaction:
        return
    conn.exec_driver_sql("SET LOCAL jit = off")
    conn.info["jit_off_in"] = conn.get_transaction()
