"""Time partitions of the verdict tables on Postgres: created ahead, dropped whole.

``verdicts``, ``verdict_scores`` and ``verdict_samples`` are partitioned by range on
``created_at``, one partition per UTC day, the three tables alike, so a day of
verdicts with its scores and kept samples is three partitions with the same bounds.

Why ``created_at`` and not ``sample_ts``: retention counts from ``created_at`` (a
backfill of old samples is kept as long as any other verdict), so a day past
retention is whole partitions to drop; ``verdict_samples`` has only ``created_at``;
and a worker stamps ``created_at`` with its own clock, so rows arrive in today's
partition and the default partition stays empty in practice. The pages and the alert
engine select on ``sample_ts``; they also bound ``created_at`` from below by the
window's start less :data:`SAMPLE_TIME_LEAD` (:func:`created_since`): a sample is
judged after it happened (its time falls back to the enqueue time), so only the
partitions of the window and after it are read. A sample dated more than
:data:`SAMPLE_TIME_LEAD` after it was judged (a producer's clock far ahead) is stored
and exported, but windows on sample time that start after its judging miss it.

Partitions are created :data:`DAYS_AHEAD` days ahead by ``evalfleet migrate`` and
``evalfleet beat`` (:func:`ensure_partitions`). A default partition catches a row
outside every partition (the beat stopped for more than that, or a clock far off),
so no insert ever fails. Creating a day's partition first moves that day's rows out
of the default partition in the same transaction (an attach is refused while the
default holds rows of the range). Because a default partition exists, partitions are
detached without ``CONCURRENTLY`` (Postgres forbids it then): dropping one takes the
parent's lock for a moment, bounded by :data:`DDL_LOCK_TIMEOUT_MS`.

SQLite, the embedded default, keeps its plain tables; everything here is Postgres only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, text
from sqlalchemy.engine import Connection

from evalfleet.store.rollup import subtract_partition

#: The tables partitioned by day on ``created_at``, parents of the same bounds.
PARTITIONED_TABLES = ("verdicts", "verdict_scores", "verdict_samples")

#: Days of partitions kept ready ahead of today.
DAYS_AHEAD = 7

#: How far after its judging a sample's time may be and still be found by a window on
#: sample time (producers' clock skew).
SAMPLE_TIME_LEAD = timedelta(hours=1)

#: Longest wait for a table lock by partition DDL before giving up (a later run retries),
#: in milliseconds: queries queue behind a waiting ``DROP`` or ``ATTACH``.
DDL_LOCK_TIMEOUT_MS = 5_000

#: Seconds between two runs of :func:`maintain` by ``evalfleet beat``.
MAINTENANCE_INTERVAL_S = 3600.0

#: Suffix of each table's default partition.
DEFAULT_SUFFIX = "default"

#: Suffix of each table's pre-partitioning rows (``migrations/versions/0008``).
LEGACY_SUFFIX = "legacy"

_DAY = timedelta(days=1)
_BOUND = re.compile(r"FOR VALUES FROM \((?P<start>[^)]*)\) TO \((?P<end>[^)]*)\)")
_PARTITION_NAME = re.compile(
    rf"^(?:{'|'.join(PARTITIONED_TABLES)})_(?:p\d{{8}}|{DEFAULT_SUFFIX}|{LEGACY_SUFFIX})$")


@dataclass(frozen=True, slots=True)
class Partition:
    """One partition of a partitioned table."""

    name: str
    suffix: str
    """What follows ``<table>_``: ``pYYYYMMDD``, ``default`` or ``legacy`` (the same
    suffix names the partitions of one range in each of :data:`PARTITIONED_TABLES`)."""
    start: datetime | None
    """Inclusive lower bound; None: unbounded (or the default partition)."""
    end: datetime | None
    """Exclusive upper bound; None: unbounded (or the default partition)."""

    @property
    def is_default(self) -> bool:
        """True for the default partition."""
        return self.suffix == DEFAULT_SUFFIX


def is_partition_name(name: str) -> bool:
    """True when ``name`` names a partition of a verdict table (schema comparisons skip them)."""
    return _PARTITION_NAME.match(name) is not None


def day_start(moment: datetime) -> datetime:
    """The UTC midnight at or before ``moment``."""
    moment = moment.astimezone(UTC)
    return datetime(moment.year, moment.month, moment.day, tzinfo=UTC)


def day_suffix(day: datetime) -> str:
    """The suffix of the partitions of the UTC day starting at ``day``."""
    return f"p{day:%Y%m%d}"


def created_since(start: datetime) -> datetime:
    """The lower bound on ``created_at`` of rows whose sample time is at or after ``start``."""
    return start - SAMPLE_TIME_LEAD


def days_to_create(existing: Sequence[Partition], *, start: datetime,
                   end: datetime) -> list[datetime]:
    """The UTC days in ``[start, end)`` that no ranged partition covers any part of.

    Args:
        existing: A table's partitions.
        start: First day wanted (truncated to its midnight).
        end: Days before this.

    Returns:
        The midnights of the days to create, oldest first.
    """
    days = []
    day = day_start(start)
    while day < end:
        if not any(_overlaps(p, day, day + _DAY) for p in existing if not p.is_default):
            days.append(day)
        day += _DAY
    return days


def expired(existing: Sequence[Partition], *, before: datetime) -> list[Partition]:
    """The ranged partitions whose every row was created before ``before``, oldest first."""
    return sorted((p for p in existing if not p.is_default and p.end is not None
                   and p.end <= before), key=lambda p: p.end or before)


def is_partitioned(conn: Connection) -> bool:
    """True when ``verdicts`` is a partitioned table (Postgres after revision 0008)."""
    if conn.dialect.name != "postgresql":
        return False
    return bool(conn.execute(text(
        "SELECT EXISTS (SELECT 1 FROM pg_class WHERE oid = to_regclass('verdicts')"
        " AND relkind = 'p')")).scalar_one())


def list_partitions(conn: Connection, table: str) -> list[Partition]:
    """The partitions of ``table`` with their bounds.

    Raises:
        ValueError: A partition's bound cannot be read (not made by this module).
    """
    rows = conn.execute(text(
        "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid, true) FROM pg_inherits i"
        " JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = CAST(:t AS regclass)"
        " ORDER BY c.relname"), {"t": table}).all()
    # Bounds print in the session's time zone; read them as UTC.
    return [_partition(table, name, bound) for name, bound in rows]


def ensure_partitions(conn: Connection, *, now: datetime, days_ahead: int = DAYS_AHEAD,
                      since: datetime | None = None) -> list[str]:
    """Create the daily partitions from today (or ``since``) to ``days_ahead`` days ahead,
    and each table's default partition, where missing; call in a transaction.

    Rows the default partition holds for a day being created move into it.

    Args:
        conn: A connection in a transaction, on a store with :func:`is_partitioned`.
        now: The current time.
        days_ahead: Days after today to cover.
        since: First day to cover, when earlier than today (tests, a backfill).

    Returns:
        The names of the partitions created.
    """
    _bound_locks(conn)
    created = []
    first = day_start(min(since, now) if since is not None else now)
    for table in PARTITIONED_TABLES:
        existing = list_partitions(conn, table)
        if not any(p.is_default for p in existing):
            name = f"{table}_{DEFAULT_SUFFIX}"
            conn.execute(text(f"CREATE TABLE {name} PARTITION OF {table} DEFAULT"))
            created.append(name)
        for day in days_to_create(existing, start=first,
                                  end=day_start(now) + (days_ahead + 1) * _DAY):
            created.append(_create_day(conn, table, day))
    return created


def maintain(engine: Engine, *, now: datetime) -> list[str]:
    """:func:`ensure_partitions` in a transaction of its own, on a partitioned store
    (``evalfleet beat`` calls it every :data:`MAINTENANCE_INTERVAL_S`).

    Returns:
        The names of the partitions created (none on SQLite or an unpartitioned store).
    """
    with engine.begin() as conn:
        return ensure_partitions(conn, now=now) if is_partitioned(conn) else []


def drop_partition(conn: Connection, suffix: str,
                   tables: Sequence[str] = PARTITIONED_TABLES) -> None:
    """Drop the partitions with ``suffix`` of ``tables`` (scores and samples before their
    verdicts); call in a transaction, so all or none go.

    Args:
        conn: A connection in a transaction.
        suffix: The partitions' suffix (:attr:`Partition.suffix`).
        tables: Some of :data:`PARTITIONED_TABLES`.
    """
    _bound_locks(conn)
    if "verdict_scores" in tables:
        # A dropped table fires no trigger: its scores leave the rollups first.
        subtract_partition(conn, suffix)
    for table in reversed(PARTITIONED_TABLES):
        if table in tables:
            conn.execute(text(f"DROP TABLE IF EXISTS {table}_{suffix}"))


def _create_day(conn: Connection, table: str, day: datetime) -> str:
    name = f"{table}_{day_suffix(day)}"
    bounds = {"start": day, "end": day + _DAY}
    conn.execute(text(f"CREATE TABLE {name} (LIKE {table} INCLUDING DEFAULTS)"))
    # Usually nothing: rows land in the default partition only while no partition of
    # their day exists.
    conn.execute(text(
        f"WITH moved AS (DELETE FROM {table}_{DEFAULT_SUFFIX}"
        " WHERE created_at >= :start AND created_at < :end RETURNING *)"
        f" INSERT INTO {name} SELECT * FROM moved"), bounds)
    start, end = (_literal(day), _literal(day + _DAY))
    conn.execute(text(
        f"ALTER TABLE {table} ATTACH PARTITION {name} FOR VALUES FROM ({start}) TO ({end})"))
    return name


def _bound_locks(conn: Connection) -> None:
    conn.execute(text(f"SET LOCAL lock_timeout = {DDL_LOCK_TIMEOUT_MS}"))
    conn.execute(text("SET LOCAL TIME ZONE 'UTC'"))


def _literal(moment: datetime) -> str:
    # A bound is DDL: no parameters. The text comes from a datetime, never from input.
    return f"'{moment.astimezone(UTC).isoformat()}'"


def _partition(table: str, name: str, bound: str) -> Partition:
    suffix = name[len(table) + 1:]
    if bound == "DEFAULT":
        return Partition(name=name, suffix=suffix, start=None, end=None)
    found = _BOUND.search(bound)
    if found is None:
        raise ValueError(f"partition {name}: unreadable bound {bound!r}")
    return Partition(name=name, suffix=suffix, start=_bound_value(found["start"]),
                     end=_bound_value(found["end"]))


def _bound_value(value: str) -> datetime | None:
    if value.upper() in ("MINVALUE", "MAXVALUE"):
        return None
    moment = datetime.fromisoformat(value.strip("'"))
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _overlaps(partition: Partition, start: datetime, end: datetime) -> bool:
    return ((partition.start is None or partition.start < end)
            and (partition.end is None or start < partition.end))
