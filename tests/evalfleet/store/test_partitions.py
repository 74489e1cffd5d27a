"""Day partitions of the Postgres store: created ahead, the default partition, purge by
partition, the key across partitions, and the upgrade of a filled store (revision 0008).

Each test gets a database of its own (partitions are schema, not rows: a truncate
would not undo them).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from evalfleet.ops.purger import Purger
from evalfleet.ops.retention import RetentionPolicy
from evalfleet.store import ClaimState, PostgresStore, VerdictKey, migrate
from evalfleet.store.partitions import (
    DAYS_AHEAD,
    Partition,
    day_start,
    day_suffix,
    days_to_create,
    ensure_partitions,
    expired,
    list_partitions,
)
from evalfleet.store.queries.evidence import lowest_scoring, purge_samples
from evalfleet.store.upgrade import prepare
from tests.evalfleet.store.test_sql import record

REAL_NOW = datetime.now(UTC)
DAY = timedelta(days=1)
#: A day whose partitions ``evalfleet migrate`` made, past the legacy partition's bound.
BASE = day_start(REAL_NOW) + 3 * DAY


@pytest.fixture
def pg(empty_postgres_url: str) -> Iterator[PostgresStore]:
    """A partitioned store on a fresh database."""
    store = PostgresStore(empty_postgres_url)
    migrate(store.engine)
    yield store
    store.close()


def where(store: PostgresStore, table: str) -> dict[int, str]:
    """The partition of each row of ``table``, by verdict id."""
    column = "id" if table == "verdicts" else "verdict_id"
    with store.engine.connect() as conn:
        return {row[0]: row[1] for row in conn.execute(text(
            f"SELECT {column}, tableoid::regclass::text FROM {table}"))}


def count(store: PostgresStore, table: str) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())


def aged(n: int, created_at: datetime, *, sample_id: str | None = None) -> object:
    return record(VerdictKey(sample_id or f"s{n}", "rag_qa", "v1", "judge"),
                  created_at=created_at, sample_ts=created_at - timedelta(minutes=1),
                  scores={"faithfulness": 0.5, "correct": 1.0},
                  sample={"input": f"q{n}", "output": "a"})


def test_partitions_are_made_ahead_and_the_default_catches_the_rest(
        pg: PostgresStore) -> None:
    with pg.engine.connect() as conn:
        suffixes = {p.suffix for p in list_partitions(conn, "verdicts")}
    ahead = {day_suffix(day_start(REAL_NOW) + n * DAY) for n in range(2, DAYS_AHEAD + 1)}
    assert ahead <= suffixes and {"legacy", "default"} <= suffixes
    early = REAL_NOW - timedelta(days=400)
    late = day_start(REAL_NOW) + 30 * DAY + timedelta(hours=5)
    assert pg.save(verdicts=[aged(1, early), aged(2, late), aged(3, BASE)], owner="o") == 3
    for table in ("verdicts", "verdict_scores", "verdict_samples"):
        assert set(where(pg, table).values()) == {
            f"{table}_legacy", f"{table}_default", f"{table}_{day_suffix(BASE)}"}
    # The beat reaching the late day moves its rows out of the default partition.
    with pg.engine.begin() as conn:
        created = ensure_partitions(conn, now=late - 2 * DAY, days_ahead=3)
    late_day = day_suffix(day_start(late))
    assert f"verdicts_{late_day}" in created
    for table in ("verdicts", "verdict_scores", "verdict_samples"):
        assert sorted(where(pg, table).values()) == sorted(
            [f"{table}_legacy", f"{table}_{late_day}", f"{table}_{day_suffix(BASE)}"])
    assert count(pg, "verdict_scores") == 6 and count(pg, "verdict_keys") == 3
    with pg.engine.begin() as conn:
        assert ensure_partitions(conn, now=late - 2 * DAY, days_ahead=3) == []


def test_purge_drops_whole_days_and_trims_the_boundary(pg: PostgresStore) -> None:
    ages = [timedelta(hours=h) for h in (2, 20, 26, 30, 40, 50, 60, 70)]
    moments = [BASE + 3 * DAY - age for age in ages]
    pg.save(verdicts=[aged(n, moment) for n, moment in enumerate(moments)], owner="o")
    now = BASE + 3 * DAY
    # Verdicts kept 35 hours: the cut-off is at BASE + 37 h.
    policy = RetentionPolicy(verdict_days=35 / 24)
    dry = Purger(pg, policy, batch_rows=2).run(now=now, dry_run=True)
    assert dry.verdicts_deleted == {"rag_qa": 4} and count(pg, "verdicts") == 8
    report = Purger(pg, policy, batch_rows=2).run(now=now)
    assert report.verdicts_deleted == {"rag_qa": 4}
    # Day BASE (50, 60 and 70 hours old) went whole, and so did the legacy partition;
    # the verdict 40 hours old (BASE + 32 h) was trimmed from day BASE + 1.
    assert report.partitions_dropped[-1] == day_suffix(BASE)
    assert "legacy" in report.partitions_dropped
    kept = {record.key.sample_id for record in pg.iter_verdicts()}
    assert kept == {"s0", "s1", "s2", "s3"}
    assert count(pg, "verdict_scores") == 2 * len(kept)
    assert count(pg, "verdict_keys") == len(kept)
    assert count(pg, "verdict_samples") == len(kept)
    # Samples kept 21 hours: day BASE + 1 (26 and 30 hours old) goes whole.
    assert purge_samples(pg.engine, before=now - timedelta(hours=21)) == (2, 2)
    assert {r.key.sample_id for r in pg.iter_verdicts(with_samples=True)
            if r.sample is not None} == {"s0", "s1"}
    with pg.engine.connect() as conn:
        left = {p.suffix for p in list_partitions(conn, "verdict_samples")}
    assert day_suffix(BASE + DAY) not in left and day_suffix(BASE + 2 * DAY) in left
    assert Purger(pg, policy).run(now=now).verdicts_deleted == {"rag_qa": 0}


def test_a_redelivered_job_is_judged_once_across_partitions(pg: PostgresStore) -> None:
    key = VerdictKey("req-1", "rag_qa", "v1", "judge")
    assert pg.save(verdicts=[aged(1, BASE, sample_id="req-1")], owner="a") == 1
    (claim,) = pg.claim([key], owner="b", lease_s=60, now=BASE + 2 * DAY)
    assert claim.state is ClaimState.DONE
    # Judged again anyway (a claim that expired mid-call) and saved two days later.
    assert pg.save(verdicts=[aged(1, BASE + 2 * DAY, sample_id="req-1")], owner="b") == 0
    assert list(where(pg, "verdicts").values()) == [f"verdicts_{day_suffix(BASE)}"]
    assert count(pg, "verdict_scores") == 2 and count(pg, "verdict_keys") == 1
    # Two copies in one batch: the first is kept.
    twice = [aged(2, BASE + DAY, sample_id="req-2"), aged(3, BASE, sample_id="req-2")]
    assert pg.save(verdicts=twice, owner="c") == 1
    (kept,) = [r for r in pg.iter_verdicts() if r.key.sample_id == "req-2"]
    assert kept.created_at == BASE + DAY


def test_upgrade_of_a_filled_store_interrupted_and_resumed(empty_postgres_url: str) -> None:
    store = PostgresStore(empty_postgres_url)
    migrate(store.engine, revision="0007")
    fill(store, first=1, last=3000)
    calls = []

    def interrupt(done: int) -> None:
        calls.append(done)
        if len(calls) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        prepare(store.engine, now=REAL_NOW, batch_rows=1000, on_batch=interrupt)
    # The fleet goes on writing the old way meanwhile; a concurrent index build was cut.
    fill(store, first=3001, last=3200)
    with store.engine.begin() as conn:
        conn.execute(text("CREATE UNIQUE INDEX ux_verdict_scores_partition_key"
                          " ON verdict_scores (verdict_id, name, created_at)"))
        conn.execute(text("UPDATE pg_index SET indisvalid = false"
                          " WHERE indexrelid = 'ux_verdict_scores_partition_key'::regclass"))
    migrate(store.engine)
    with store.engine.connect() as conn:
        totals = conn.execute(text(
            "SELECT (SELECT count(*) FROM verdicts), (SELECT count(DISTINCT id) FROM verdicts),"
            " (SELECT count(*) FROM verdict_scores),"
            " (SELECT count(DISTINCT (verdict_id, name)) FROM verdict_scores),"
            " (SELECT count(*) FROM verdict_samples), (SELECT count(*) FROM verdict_keys),"
            " (SELECT count(*) FROM verdicts_legacy)")).one()
        partitions = {p.suffix for p in list_partitions(conn, "verdict_scores")}
    assert tuple(totals) == (3200, 3200, 6400, 6400, 1600, 3200, 3200)
    assert {"legacy", "default"} <= partitions
    # Old keys hold after the upgrade; new verdicts go to the day's partition.
    old = VerdictKey("s7", "rag_qa", "v1", "judge")
    (claim,) = store.claim([old], owner="w", lease_s=60, now=REAL_NOW)
    assert claim.state is ClaimState.DONE
    assert store.save(verdicts=[aged(7, BASE, sample_id="s7"), aged(1, BASE, sample_id="new")],
                      owner="w") == 1
    assert set(where(store, "verdict_scores").values()) == {
        "verdict_scores_legacy", f"verdict_scores_{day_suffix(BASE)}"}
    # The legacy scores sit just under the bound: a window on them still finds them.
    with store.engine.connect() as conn:
        worst = lowest_scoring(conn, metric="rag_qa", score="faithfulness",
                               start=REAL_NOW - timedelta(minutes=9), end=REAL_NOW,
                               labels={"app": "bot"}, limit=10)
    assert sorted(e.sample_id for e in worst) == ["s1", "s2", "s3", "s4"]
    store.close()


def fill(store: PostgresStore, *, first: int, last: int) -> None:
    """Verdicts ``s<first>``..``s<last>`` the way revision 0007 stored them, over five
    days before now: two scores each, a kept sample for every other one."""
    with store.engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO verdicts (id, sample_id, metric, prompt_version, judge_model, status,"
            " scores, raw_scores, attempts, latency_ms, attributes, sample_ts, created_at)"
            " SELECT n, 's' || n, 'rag_qa', 'v1', 'judge', 'ok',"
            " '{\"faithfulness\": 0.5, \"correct\": 1}', '{}', 1, 5, '{\"app\": \"bot\"}',"
            " :now - n * interval '2 minutes', :now - n * interval '2 minutes'"
            " FROM generate_series(CAST(:first AS int), CAST(:last AS int)) AS n"),
            {"now": REAL_NOW, "first": first, "last": last})
        conn.execute(text("SELECT setval('verdicts_id_seq', :last)"), {"last": last})
        conn.execute(text(
            "INSERT INTO verdict_scores (verdict_id, name, metric, value, sample_ts)"
            " SELECT id, s.key, metric, CAST(s.value AS float8), sample_ts FROM verdicts,"
            " jsonb_each(scores) AS s WHERE id BETWEEN :first AND :last"),
            {"first": first, "last": last})
        conn.execute(text(
            "INSERT INTO verdict_samples (verdict_id, created_at, sample)"
            " SELECT id, created_at, '{\"input\": \"q\"}' FROM verdicts"
            " WHERE id BETWEEN :first AND :last AND id % 2 = 0"),
            {"first": first, "last": last})


@pytest.mark.parametrize(("existing", "expected"), [
    ([], [0, 1, 2]),
    ([(None, 1)], [1, 2]),  # the legacy partition up to day 1
    ([(1, 2)], [0, 2]),
])
def test_days_to_create(existing: list[tuple[int | None, int | None]],
                        expected: list[int]) -> None:
    partitions = [Partition(name="p", suffix="p", start=None if s is None else BASE + s * DAY,
                            end=None if e is None else BASE + e * DAY) for s, e in existing]
    assert days_to_create(partitions, start=BASE, end=BASE + 3 * DAY) == [
        BASE + n * DAY for n in expected]
    assert expired(partitions, before=BASE + 2 * DAY) == partitions
