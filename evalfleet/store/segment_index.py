"""The verdicts' segment index built without holding writes back (revision 0023).

``ix_verdicts_metric_segment_sample_ts`` on ``verdicts (metric, md5(attributes::text),
sample_ts)``: created on the partitioned parent in the migration's transaction, Postgres
builds it on every partition under a lock that holds that partition's writes back for
the whole build (``CREATE INDEX`` cannot be ``CONCURRENTLY`` on a partitioned table nor
in a transaction). So ``evalfleet migrate`` builds it first, outside any transaction:

1. the parent's index ``ON ONLY verdicts``: a catalogue entry, invalid until every
   partition has its own; partitions created from then on get theirs when created;
2. each partition's index ``CONCURRENTLY`` (writes go on), then attached to the
   parent's; once the last is attached the parent's is valid.

The migration's ``CREATE INDEX IF NOT EXISTS`` then finds it. Each step is skipped when
done, so an interrupted run resumes: a partition's build cut short leaves an invalid
index, dropped and built again.
"""

from __future__ import annotations

from sqlalchemy import Engine, text
from sqlalchemy.engine import Connection

#: The index, as revision 0023 names it.
SEGMENT_INDEX = "ix_verdicts_metric_segment_sample_ts"

#: Its columns.
SEGMENT_COLUMNS = "(metric, md5(CAST(attributes AS text)), sample_ts)"


def needs_segment_index(conn: Connection) -> bool:
    """True on a Postgres store whose ``verdicts`` is partitioned (revision 0008 on) and
    has no valid segment index yet."""
    if conn.dialect.name != "postgresql":
        return False
    return bool(conn.execute(text(
        "SELECT EXISTS (SELECT 1 FROM pg_class WHERE oid = to_regclass('verdicts')"
        " AND relkind = 'p') AND NOT EXISTS (SELECT 1 FROM pg_index"
        " WHERE indexrelid = to_regclass(:n) AND indisvalid)"), {"n": SEGMENT_INDEX}).scalar_one())


def build_segment_index(engine: Engine) -> list[str]:
    """Build the segment index a partition at a time, ``CONCURRENTLY`` (see the module
    docstring); nothing when :func:`needs_segment_index` says so.

    Args:
        engine: The store's engine.

    Returns:
        The partitions whose index was built here.
    """
    built: list[str] = []
    with engine.connect() as plain:
        conn = plain.execution_options(isolation_level="AUTOCOMMIT")
        if not needs_segment_index(conn):
            return built
        conn.execute(text(f"CREATE INDEX IF NOT EXISTS {SEGMENT_INDEX} ON ONLY verdicts"
                          f" {SEGMENT_COLUMNS}"))
        # A partition made meanwhile gets its index with it: the list shrinks to none.
        while missing := _partitions_without(conn):
            for partition in missing:
                _build_one(conn, partition)
                built.append(partition)
    return built


def _partitions_without(conn: Connection) -> list[str]:
    """The partitions of ``verdicts`` with no index attached to the parent's."""
    return list(conn.execute(text(
        "SELECT c.relname FROM pg_inherits p JOIN pg_class c ON c.oid = p.inhrelid"
        " WHERE p.inhparent = to_regclass('verdicts') AND NOT EXISTS ("
        "  SELECT 1 FROM pg_inherits a JOIN pg_index x ON x.indexrelid = a.inhrelid"
        "  WHERE a.inhparent = to_regclass(:n) AND x.indrelid = c.oid)"
        " ORDER BY c.relname"), {"n": SEGMENT_INDEX}).scalars())


def _build_one(conn: Connection, partition: str) -> None:
    """One partition's index, built without holding its writes, attached to the parent's."""
    name = f"{SEGMENT_INDEX}_{partition.removeprefix('verdicts_')}"
    valid = conn.execute(text("SELECT indisvalid FROM pg_index WHERE indexrelid ="
                              " to_regclass(:n)"), {"n": name}).scalar_one_or_none()
    if valid is False:  # a concurrent build cut short
        conn.execute(text(f"DROP INDEX CONCURRENTLY {name}"))
    if not valid:
        conn.execute(text(f"CREATE INDEX CONCURRENTLY {name} ON {partition} {SEGMENT_COLUMNS}"))
    conn.execute(text(f"ALTER INDEX {SEGMENT_INDEX} ATTACH PARTITION {name}"))
