"""Dead letters as operators select them: stream, count, delete, and lock a batch to
replay (``evalfleet.ops.dead_letter`` decides what a replay publishes)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, delete, func, select
from sqlalchemy.engine import RowMapping

from evalfleet.store.base import DeadLetter
from evalfleet.store.schema import dead_letters
from evalfleet.store.sql import SqlStore, dead_letter_from_row, to_utc

#: Dead letters deleted per transaction by a purge.
PURGE_BATCH_ROWS = 10_000


@dataclass(frozen=True)
class DeadLetterFilter:
    """Which dead letters an operation applies to; unset fields do not filter."""

    metric: str | None = None
    error_class: str | None = None
    since: datetime | None = None
    """Created at or after."""
    until: datetime | None = None
    """Created before."""
    limit: int | None = None
    """At most this many, oldest first."""

    @property
    def selects_all(self) -> bool:
        """True when no field narrows the selection (a limit alone does not count)."""
        return (self.metric is None and self.error_class is None and self.since is None
                and self.until is None)


@dataclass(frozen=True)
class StoredDeadLetter:
    """A dead letter with its row id."""

    id: int
    letter: DeadLetter


def iter_dead_letters(store: SqlStore, selection: DeadLetterFilter) -> Iterator[StoredDeadLetter]:
    """Stream the selected dead letters, oldest first."""
    query = select(dead_letters).where(*_conditions(selection)).order_by(dead_letters.c.id)
    if selection.limit is not None:
        query = query.limit(selection.limit)
    with store.connect() as conn:
        for row in conn.execution_options(yield_per=1000).execute(query).mappings():
            yield _stored(row)


def count_dead_letters(store: SqlStore, selection: DeadLetterFilter) -> int:
    """How many dead letters the selection holds (its limit applied)."""
    query = select(dead_letters.c.id).where(*_conditions(selection))
    if selection.limit is not None:
        query = query.limit(selection.limit)
    with store.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(query.subquery())).scalar_one())


def replay_batch(
    store: SqlStore, selection: DeadLetterFilter, *, after_id: int, take: int,
    handle: Callable[[list[StoredDeadLetter]], Sequence[int]],
) -> list[StoredDeadLetter]:
    """In one transaction: lock the next ``take`` selected letters after ``after_id``
    (``FOR UPDATE SKIP LOCKED`` on Postgres; SQLite takes the whole database), pass them
    to ``handle``, delete the ids it returns, commit.

    ``handle`` publishes their jobs: raising there rolls back, and the letters stay.

    Returns:
        The letters locked, oldest first (empty: none left).
    """
    d = dead_letters.c
    query = (select(dead_letters).where(*_conditions(selection), d.id > after_id)
             .order_by(d.id).limit(take).with_for_update(skip_locked=True))
    with store.begin() as conn:
        rows = [_stored(row) for row in conn.execute(query).mappings()]
        done = list(handle(rows))
        if done:
            conn.execute(delete(dead_letters).where(d.id.in_(done)))
    return rows


def purge_dead_letters(
    store: SqlStore, selection: DeadLetterFilter, *, dry_run: bool = False,
    batch_rows: int = PURGE_BATCH_ROWS,
) -> int:
    """Delete the selected dead letters, ``batch_rows`` per transaction.

    Returns:
        How many were deleted (in a dry run: would be).
    """
    if dry_run:
        return count_dead_letters(store, selection)
    d = dead_letters.c
    deleted, remaining = 0, selection.limit
    while remaining is None or remaining > 0:
        take = batch_rows if remaining is None else min(batch_rows, remaining)
        batch = (select(d.id).where(*_conditions(selection)).order_by(d.id).limit(take)
                 .scalar_subquery())
        with store.begin() as conn:
            count = conn.execute(delete(dead_letters).where(d.id.in_(batch))).rowcount
        deleted += count
        remaining = None if remaining is None else remaining - count
        if count < take:
            break
    return deleted


def _conditions(selection: DeadLetterFilter) -> list[ColumnElement[bool]]:
    """The WHERE conditions on ``dead_letters``."""
    d = dead_letters.c
    found: list[ColumnElement[bool]] = []
    if selection.metric is not None:
        found.append(d.metric == selection.metric)
    if selection.error_class is not None:
        found.append(d.error_class == selection.error_class)
    if selection.since is not None:
        found.append(d.created_at >= to_utc(selection.since))
    if selection.until is not None:
        found.append(d.created_at < to_utc(selection.until))
    return found


def _stored(row: RowMapping) -> StoredDeadLetter:
    return StoredDeadLetter(row["id"], dead_letter_from_row(row))
