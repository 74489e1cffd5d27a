"""Verdict persistence: the store contract, its Postgres and SQLite implementations.

What one feature asks of the store beyond the contract is in ``evalfleet.store.queries``.
"""

from __future__ import annotations

from evalfleet.core.review_slice import ReviewSlice
from evalfleet.store.base import (
    CalibrationRun,
    Claim,
    ClaimState,
    DailyCost,
    DeadLetter,
    JudgeIdentity,
    StoreCounts,
    VerdictKey,
    VerdictRecord,
    VerdictStore,
)
from evalfleet.store.migration import migrate, schema_revision
from evalfleet.store.postgres import PostgresStore
from evalfleet.store.sql import SqlStore, Transaction
from evalfleet.store.sqlite import SqliteStore

__all__ = [
    "CalibrationRun",
    "Claim",
    "ClaimState",
    "DailyCost",
    "DeadLetter",
    "JudgeIdentity",
    "PostgresStore",
    "SqlStore",
    "SqliteStore",
    "StoreCounts",
    "Transaction",
    "VerdictKey",
    "VerdictRecord",
    "VerdictStore",
    "migrate",
    "open_store",
    "schema_revision",
]


def open_store(url: str, *, pool_size: int = 10, review: ReviewSlice | None = None) -> SqlStore:
    """The store for a SQLAlchemy URL: SQLite for ``sqlite://``, else PostgreSQL.

    Args:
        url: A SQLAlchemy URL.
        pool_size: Connections kept open (PostgreSQL).
        review: The random review slice to queue as verdicts are saved (workers); None
            queues nothing.
    """
    if url.startswith("sqlite"):
        return SqliteStore(url, review=review)
    return PostgresStore(url, pool_size=pool_size, review=review)
