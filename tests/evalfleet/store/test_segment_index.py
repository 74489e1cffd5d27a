"""The segment index of revision 0023 built a partition at a time, concurrently, by
``evalfleet migrate`` on a store that already holds verdicts (Postgres)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import text

from evalfleet.store import PostgresStore, migrate, open_store
from evalfleet.store.partitions import day_start, day_suffix, ensure_partitions
from evalfleet.store.segment_index import (
    SEGMENT_INDEX,
    build_segment_index,
    needs_segment_index,
)
from tests.evalfleet.ops.builders import verdict

DAY = timedelta(days=1)
# Days past the fresh store's legacy partition, so they get partitions of their own.
NOW = day_start(datetime.now(UTC)) + 20 * DAY + timedelta(hours=12)


def _attached(store: PostgresStore) -> dict[str, bool]:
    """Each verdicts partition: whether an index of it is attached to the parent's."""
    with store.engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT c.relname, EXISTS (SELECT 1 FROM pg_inherits a JOIN pg_index x"
            "  ON x.indexrelid = a.inhrelid WHERE a.inhparent = to_regclass(:n)"
            "  AND x.indrelid = c.oid AND x.indisvalid)"
            " FROM pg_inherits p JOIN pg_class c ON c.oid = p.inhrelid"
            " WHERE p.inhparent = to_regclass('verdicts')"), {"n": SEGMENT_INDEX}).all()
    return dict((name, bool(found)) for name, found in rows)


def _parent_valid(store: PostgresStore) -> bool | None:
    with store.engine.connect() as conn:
        return conn.execute(text("SELECT indisvalid FROM pg_index WHERE indexrelid ="
                                 " to_regclass(:n)"), {"n": SEGMENT_INDEX}).scalar_one_or_none()


def test_migrate_builds_it_per_partition_resuming_a_cut_build(empty_postgres_url: str) -> None:
    store = open_store(empty_postgres_url)
    assert isinstance(store, PostgresStore)
    migrate(store.engine, revision="0022")
    with store.engine.begin() as conn:
        ensure_partitions(conn, now=NOW, since=NOW - 2 * DAY, days_ahead=1)
    store.save(verdicts=[verdict(f"v{i}", created_at=NOW - i * DAY, sample_ts=NOW - i * DAY,
                                 attributes={"app": f"a{i}"}) for i in range(3)], owner="w")
    # A build cut short: one partition's index left invalid, attached to nothing.
    cut = f"verdicts_{day_suffix(NOW)}"
    with store.engine.begin() as conn:
        conn.execute(text(f"CREATE INDEX {SEGMENT_INDEX}_{day_suffix(NOW)} ON {cut}"
                          " (metric, md5(CAST(attributes AS text)), sample_ts)"))
        conn.execute(text("UPDATE pg_index SET indisvalid = false WHERE indexrelid ="
                          f" to_regclass('{SEGMENT_INDEX}_{day_suffix(NOW)}')"))
        assert needs_segment_index(conn)
    assert _parent_valid(store) is None
    migrate(store.engine)
    assert _parent_valid(store) is True
    found = _attached(store)
    assert found and all(found.values()) and cut in found
    # A day's partition made afterwards gets its index with it.
    with store.engine.begin() as conn:
        ensure_partitions(conn, now=NOW + 3 * DAY, days_ahead=0)
        assert not needs_segment_index(conn)
    assert all(_attached(store).values())
    assert build_segment_index(store.engine) == []  # done: nothing to do
    # The migration's own statement found it and built nothing more.
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one() \
            >= "0023"
    store.close()


def test_a_partition_made_after_the_parent_entry_gets_its_index(empty_postgres_url: str
                                                                 ) -> None:
    store = open_store(empty_postgres_url)
    migrate(store.engine, revision="0022")
    with store.engine.begin() as conn:
        ensure_partitions(conn, now=NOW, days_ahead=0)
        conn.execute(text(f"CREATE INDEX {SEGMENT_INDEX} ON ONLY verdicts"
                          " (metric, md5(CAST(attributes AS text)), sample_ts)"))
        ensure_partitions(conn, now=NOW + DAY, days_ahead=0)
    built = build_segment_index(store.engine)
    assert f"verdicts_{day_suffix(NOW + DAY)}" not in built  # it came with its index
    assert f"verdicts_{day_suffix(NOW)}" in built
    assert _parent_valid(store) is True and all(_attached(store).values())
    store.close()
