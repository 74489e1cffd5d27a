"""Turning a filled Postgres store into a partitioned one (revision 0008), resumably.

No row moves. Each of ``verdicts``, ``verdict_scores`` and ``verdict_samples`` becomes
the one *legacy* partition of a new partitioned table of the same name, from the
beginning of time to a bound ``B`` (a UTC midnight at least a day ahead); daily
partitions follow from ``B``, and retention retires the legacy partition whole once
its newest verdict is past it. The work is in two parts:

- :func:`prepare`, run by ``evalfleet migrate`` before Alembic, with the fleet
  running: the key table ``verdict_keys`` filled from the existing verdicts in
  committed batches (its progress kept in ``partition_upgrade``), up to the highest
  id once the transactions open at that moment have ended (a lower id may still be
  in flight in one of them), the unique
  indexes a partition needs built ``CONCURRENTLY``, and ``created_at < B`` checked
  by a validated ``CHECK`` constraint (a scan that lets writes through). Each step
  is skipped when done; an interrupted run resumes where it stopped (a concurrent
  index build left invalid is dropped and built again).
- :func:`convert`, the migration itself, in one short transaction that holds the
  three tables' exclusive locks: the last keys, the renames, the new parents, the
  attachments (no scan: the checks prove the bound) and the next days' partitions.
  Run on a store :func:`prepare` did not see (a new or small one), it does the
  preparation itself inside the transaction, taking its locks for that long.

``verdict_scores`` had no ``created_at``: it is added with a constant default just
under ``B`` (no table rewrite), so the existing scores sit in the legacy range
beside their verdicts; new scores carry their verdict's creation time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy import Engine, text
from sqlalchemy.engine import Connection

from evalfleet.core.errors import StoreUnavailable
from evalfleet.store.partitions import (
    LEGACY_SUFFIX,
    PARTITIONED_TABLES,
    day_start,
    ensure_partitions,
)

#: Verdicts per transaction when filling ``verdict_keys``.
KEY_BATCH_ROWS = 50_000

#: Longest wait for the transactions open when the key fill begins, in seconds.
WRITER_WAIT_S = 600.0

#: Seconds between two looks at those transactions.
WRITER_POLL_S = 0.1

#: The least time between now and the legacy bound; a prepared bound nearer than this
#: is moved a day on (old workers must never write a row past it before the swap).
MIN_BOUND_MARGIN = timedelta(hours=12)

#: A verdict key's digest in SQL: ``VerdictKey.digest`` (SHA-256 of the four parts
#: joined by U+001F, in hex).
KEY_DIGEST_SQL = ("encode(sha256(convert_to(concat_ws(chr(31), sample_id, metric,"
                  " prompt_version, judge_model), 'UTF8')), 'hex')")

#: The unique index each legacy table needs to be a partition: the partitioned
#: table's primary key, which must hold the partition key.
PARTITION_KEYS = {
    "verdicts": ("pk_verdicts", "id, created_at"),
    "verdict_scores": ("pk_verdict_scores", "verdict_id, name, created_at"),
    "verdict_samples": ("pk_verdict_samples", "verdict_id, created_at"),
}

#: The partitioned parents' other indexes (each attaches the legacy table's own copy).
PARENT_INDEXES = (
    "CREATE INDEX ix_verdicts_metric_created_at ON verdicts (metric, created_at)",
    "CREATE INDEX ix_verdicts_metric_sample_ts ON verdicts (metric, sample_ts)",
    "CREATE INDEX ix_verdicts_attributes ON verdicts USING gin (attributes jsonb_path_ops)",
    "CREATE INDEX ix_verdict_scores_metric_name_sample_ts ON verdict_scores"
    " (metric, name, sample_ts) INCLUDE (value, verdict_id)",
    "CREATE INDEX ix_verdict_samples_created_at ON verdict_samples (created_at)",
)

#: The newest creation time, one index lookup per metric (not a scan of the table).
_NEWEST = text(
    "WITH RECURSIVE m(metric) AS ("
    " SELECT min(metric) FROM verdicts"
    " UNION ALL"
    " SELECT (SELECT min(v.metric) FROM verdicts v WHERE v.metric > m.metric)"
    " FROM m WHERE m.metric IS NOT NULL)"
    " SELECT max((SELECT max(v.created_at) FROM verdicts v WHERE v.metric = m.metric))"
    " FROM m WHERE m.metric IS NOT NULL")

_FOREIGN_KEYS = (("verdict_scores", "fk_verdict_scores_verdict_id_verdicts"),
                 ("verdict_samples", "fk_verdict_samples_verdict_id_verdicts"))


def needs_upgrade(conn: Connection) -> bool:
    """True on a Postgres store whose verdict tables exist and are not partitioned yet."""
    if conn.dialect.name != "postgresql":
        return False
    return bool(conn.execute(text(
        "SELECT to_regclass('verdict_samples') IS NOT NULL AND EXISTS (SELECT 1 FROM pg_class"
        " WHERE oid = to_regclass('verdicts') AND relkind = 'r')")).scalar_one())


def prepare(engine: Engine, *, now: datetime, batch_rows: int = KEY_BATCH_ROWS,
            on_batch: Callable[[int], None] | None = None,
            on_step: Callable[[str, float], None] | None = None) -> None:
    """The upgrade's long steps, online and resumable (see the module docstring).

    Args:
        engine: The store's engine (Postgres, :func:`needs_upgrade`).
        now: The current time (chooses the legacy bound).
        batch_rows: Verdict ids per committed batch of keys.
        on_batch: Called after each committed batch with the last id done.
        on_step: Called after each step with its name (``start``, ``keys``,
            ``indexes``, ``checks``) and its time in seconds.
    """
    clock = time.perf_counter()

    def step(name: str) -> None:
        nonlocal clock
        if on_step is not None:
            on_step(name, time.perf_counter() - clock)
        clock = time.perf_counter()

    with engine.begin() as conn:
        bound = _start(conn, now=now)
    step("start")
    with engine.connect() as conn:
        top = _settled_top(conn.execution_options(isolation_level="AUTOCOMMIT"))
    while True:
        with engine.begin() as conn:
            done = _fill_keys(conn, top=top, batch_rows=batch_rows)
        if done is None:
            break
        if on_batch is not None:
            on_batch(done)
    step("keys")
    with engine.connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        _build_key_indexes(conn, concurrently=True)
        step("indexes")
        _check_bounds(conn, bound)
        step("checks")


def convert(conn: Connection, *, now: datetime) -> None:
    """Make the three verdict tables partitioned, in the caller's transaction (revision 0008).

    Args:
        conn: A connection in a transaction, on a Postgres store that :func:`needs_upgrade`.
        now: The current time.
    """
    bound = _start(conn, now=now)
    conn.execute(text("LOCK TABLE verdicts, verdict_scores, verdict_samples"
                      " IN ACCESS EXCLUSIVE MODE"))
    # Under the lock no writer is in flight: every id up to the last is final.
    top = conn.execute(text("SELECT coalesce(max(id), 0) FROM verdicts")).scalar_one()
    while _fill_keys(conn, top=top, batch_rows=KEY_BATCH_ROWS) is not None:
        pass
    _build_key_indexes(conn, concurrently=False)
    _check_bounds(conn, bound)
    for table, constraint in _FOREIGN_KEYS:
        conn.execute(text(f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {constraint}"))
    for table in PARTITIONED_TABLES:
        _make_legacy_partition(conn, table, bound)
    conn.execute(text("ALTER SEQUENCE verdicts_id_seq OWNED BY verdicts.id"))
    conn.execute(text("ALTER TABLE verdict_scores ALTER COLUMN created_at DROP DEFAULT"))
    for table, (name, columns) in PARTITION_KEYS.items():
        conn.execute(text(f"ALTER TABLE {table} ADD CONSTRAINT {name} PRIMARY KEY ({columns})"))
    for statement in PARENT_INDEXES:
        conn.execute(text(statement))
    ensure_partitions(conn, now=now)
    conn.execute(text("DROP TABLE partition_upgrade"))


def _start(conn: Connection, *, now: datetime) -> datetime:
    """Create the key and progress tables, choose the legacy bound, give scores a time."""
    conn.execute(text(
        "CREATE TABLE IF NOT EXISTS verdict_keys (digest varchar(64) NOT NULL,"
        " created_at timestamptz NOT NULL, CONSTRAINT pk_verdict_keys PRIMARY KEY (digest))"))
    conn.execute(text("CREATE INDEX IF NOT EXISTS ix_verdict_keys_created_at"
                      " ON verdict_keys (created_at)"))
    conn.execute(text(
        "CREATE TABLE IF NOT EXISTS partition_upgrade (step varchar(16) PRIMARY KEY,"
        " upto bigint, at timestamptz)"))
    bound = conn.execute(text(
        "SELECT at FROM partition_upgrade WHERE step = 'bound'")).scalar_one_or_none()
    newest = conn.execute(_NEWEST).scalar_one()
    floor = max(now, newest) if newest is not None else now
    if bound is None or bound - floor < MIN_BOUND_MARGIN:
        bound = day_start(floor + MIN_BOUND_MARGIN) + timedelta(days=1)
        conn.execute(text(
            "INSERT INTO partition_upgrade (step, at) VALUES ('bound', :at)"
            " ON CONFLICT (step) DO UPDATE SET at = EXCLUDED.at"), {"at": bound})
    just_before = (bound - timedelta(microseconds=1)).isoformat()
    conn.execute(text("ALTER TABLE verdict_scores ADD COLUMN IF NOT EXISTS created_at"
                      f" timestamptz NOT NULL DEFAULT '{just_before}'"))
    conn.execute(text(
        f"ALTER TABLE verdict_scores ALTER COLUMN created_at SET DEFAULT '{just_before}'"))
    return bound


def _settled_top(conn: Connection) -> int:
    """The highest verdict id below which no row can still appear: the highest id now,
    once every transaction of this database open at that moment has ended (one of them
    may hold a lower id not committed yet). ``conn`` in autocommit.

    Raises:
        StoreUnavailable: A transaction stays open longer than :data:`WRITER_WAIT_S`.
    """
    top, moment = conn.execute(text(
        "SELECT coalesce(max(id), 0), clock_timestamp() FROM verdicts")).one()
    deadline = time.monotonic() + WRITER_WAIT_S
    while True:
        open_pids = conn.execute(text(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND xact_start < :moment"),
            {"moment": moment}).scalars().all()
        if not open_pids:
            return int(top)
        if time.monotonic() > deadline:
            raise StoreUnavailable(
                f"transactions open since before the upgrade began (pids "
                f"{', '.join(map(str, open_pids))}) did not end in {WRITER_WAIT_S:g} s")
        time.sleep(WRITER_POLL_S)


def _fill_keys(conn: Connection, *, top: int, batch_rows: int) -> int | None:
    """Add the keys of the next ``batch_rows`` verdict ids up to ``top``; the last id done,
    or None when there was nothing left."""
    lo = conn.execute(text(
        "SELECT coalesce((SELECT upto FROM partition_upgrade WHERE step = 'keys'), 0)"
    )).scalar_one()
    if lo >= top:
        return None
    hi = min(top, lo + batch_rows)
    conn.execute(text(
        f"INSERT INTO verdict_keys (digest, created_at) SELECT {KEY_DIGEST_SQL}, created_at"
        " FROM verdicts WHERE id > :lo AND id <= :hi ON CONFLICT (digest) DO NOTHING"),
        {"lo": lo, "hi": hi})
    conn.execute(text(
        "INSERT INTO partition_upgrade (step, upto) VALUES ('keys', :hi)"
        " ON CONFLICT (step) DO UPDATE SET upto = EXCLUDED.upto"), {"hi": hi})
    return int(hi)


def _build_key_indexes(conn: Connection, *, concurrently: bool) -> None:
    """The unique index of each table's partition key (:data:`PARTITION_KEYS`)."""
    how = " CONCURRENTLY" if concurrently else ""
    for table, (_, columns) in PARTITION_KEYS.items():
        name = _key_index(table)
        valid = conn.execute(text(
            "SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass(:n)"),
            {"n": name}).scalar_one_or_none()
        if valid:
            continue
        if valid is False:  # an interrupted concurrent build
            conn.execute(text(f"DROP INDEX{how} {name}"))
        conn.execute(text(f"CREATE UNIQUE INDEX{how} {name} ON {table} ({columns})"))


def _check_bounds(conn: Connection, bound: datetime) -> None:
    """A validated ``CHECK (created_at < bound)`` on each table, so attaching it as the
    legacy partition needs no scan."""
    for table in PARTITIONED_TABLES:
        name = f"ck_{table}_legacy_bound"
        found = conn.execute(text(
            "SELECT pg_get_constraintdef(oid), convalidated FROM pg_constraint"
            " WHERE conname = :n AND conrelid = CAST(:t AS regclass)"),
            {"n": name, "t": table}).first()
        stamp = bound.strftime("%Y-%m-%d")
        if found is not None and stamp not in found[0]:
            conn.execute(text(f"ALTER TABLE {table} DROP CONSTRAINT {name}"))
            found = None
        if found is None:
            conn.execute(text(f"ALTER TABLE {table} ADD CONSTRAINT {name}"
                              f" CHECK (created_at < '{bound.isoformat()}') NOT VALID"))
        if found is None or not found[1]:
            conn.execute(text(f"ALTER TABLE {table} VALIDATE CONSTRAINT {name}"))


def _make_legacy_partition(conn: Connection, table: str, bound: datetime) -> None:
    legacy = f"{table}_{LEGACY_SUFFIX}"
    # Index names are per schema: the parent's indexes take the old names.
    for (index,) in conn.execute(text(
            "SELECT indexname FROM pg_indexes WHERE tablename = :t"), {"t": table}).all():
        conn.execute(text(f"ALTER INDEX {index} RENAME TO {index}_{LEGACY_SUFFIX}"))
    conn.execute(text(f"ALTER TABLE {table} RENAME TO {legacy}"))
    key_index = f"{_key_index(table)}_{LEGACY_SUFFIX}"
    # A partitioned primary key adopts a partition's index only if a constraint owns it.
    conn.execute(text(f"ALTER TABLE {legacy} ADD CONSTRAINT {key_index}"
                      f" UNIQUE USING INDEX {key_index}"))
    conn.execute(text(f"CREATE TABLE {table} (LIKE {legacy} INCLUDING DEFAULTS)"
                      " PARTITION BY RANGE (created_at)"))
    conn.execute(text(f"ALTER TABLE {table} ATTACH PARTITION {legacy}"
                      f" FOR VALUES FROM (MINVALUE) TO ('{bound.isoformat()}')"))
    conn.execute(text(f"ALTER TABLE {legacy} DROP CONSTRAINT ck_{table}_legacy_bound"))


def _key_index(table: str) -> str:
    return f"ux_{table}_partition_key"
