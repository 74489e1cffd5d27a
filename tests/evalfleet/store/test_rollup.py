"""Score rollups against the raw computation, on Postgres and on the embedded SQLite store.

Every test ends with :func:`assert_exact`: the rollup rows equal the same sums computed in
Python from the score rows (counts, levels and earliest times exactly, sums to rounding).
"""

from __future__ import annotations

import json
import math
import random
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import delete, select

from evalfleet.ops.purger import Purger
from evalfleet.ops.retention import RetentionPolicy
from evalfleet.store import SqlStore, VerdictKey, VerdictRecord
from evalfleet.store.partitions import (
    day_start,
    day_suffix,
    drop_partition,
    ensure_partitions,
    is_partitioned,
)
from evalfleet.store.rollup import LEVEL_GRID, OFF_GRID, fold, rebuild
from evalfleet.store.schema import score_rollups, verdict_scores, verdicts
from evalfleet.store.sql import to_utc
from tests.evalfleet.ops.builders import NOW, verdict

DAY = timedelta(days=1)

Key = tuple[str, str, int, datetime, str, str, str, int]


def _bucket(moment: datetime, span_s: int) -> datetime:
    seconds = int(to_utc(moment).timestamp()) // span_s * span_s
    return datetime.fromtimestamp(seconds, UTC)


def _level(value: float | None, span_s: int) -> int:
    """On the grid, the value's multiple of 1/2520; off it, in a minute, the level of
    its tenth of 0..1 (below the first tenth's, the last's); else OFF_GRID."""
    if value is not None and abs(value) <= 1:
        level = round(value * LEVEL_GRID)
        if level / LEVEL_GRID == value:
            return level
    if value is None or span_s != 60:
        return OFF_GRID
    return OFF_GRID - 1 - min(9, max(0, math.floor(value * 10)))


def raw_rollups(store: SqlStore) -> dict[Key, tuple[int, float, float, datetime]]:
    """The rollups computed in Python from every score row and its verdict."""
    vs, v = verdict_scores.c, verdicts.c
    expected: dict[Key, list[Any]] = {}
    with store.engine.connect() as conn:
        rows = conn.execute(select(vs.metric, vs.name, vs.value, vs.sample_ts, v.attributes,
                                   v.judge_model, v.prompt_version)
                            .join(verdicts, v.id == vs.verdict_id)).all()
    for metric, name, value, sample_ts, attributes, judge_model, prompt_version in rows:
        for span_s in (60, 3600):
            key = (metric, name, span_s, _bucket(sample_ts, span_s),
                   json.dumps(attributes, sort_keys=True), judge_model, prompt_version,
                   _level(value, span_s))
            entry = expected.setdefault(key, [0, 0.0, 0.0, to_utc(sample_ts)])
            entry[0] += 1
            entry[1] += value or 0.0
            entry[2] += (value or 0.0) ** 2
            entry[3] = min(entry[3], to_utc(sample_ts))
    return {key: (n, total, total_sq, first) for key, (n, total, total_sq, first)
            in expected.items()}


def stored_rollups(store: SqlStore) -> dict[Key, tuple[int, float, float, datetime]]:
    """The rollup rows, keyed by canonical attributes (SQLite keys on the JSON text as
    written, so one segment written in two key orders holds two rows: summed here)."""
    r = score_rollups.c
    found: dict[Key, tuple[int, float, float, datetime]] = {}
    with store.engine.connect() as conn:
        rows = conn.execute(select(r.metric, r.name, r.span_s, r.bucket, r.attributes,
                                   r.judge_model, r.prompt_version, r.level,
                                   r.n, r.total, r.total_sq, r.first_ts)).all()
    for (metric, name, span_s, bucket, attributes, judge_model, prompt_version, level,
         n, total, total_sq, first) in rows:
        key = (metric, name, span_s, to_utc(bucket), json.dumps(attributes, sort_keys=True),
               judge_model, prompt_version, level)
        known = found.get(key)
        if known is not None:
            n, total, total_sq = n + known[0], total + known[1], total_sq + known[2]
            first = min(to_utc(first), known[3])
        found[key] = (n, total, total_sq, to_utc(first))
    return found


def assert_exact(store: SqlStore, *, deleted: bool = False) -> None:
    """Rollups equal the raw sums; after deletions a bucket's earliest time may still be
    that of a deleted row of it (the stated bound: less than the bucket's span)."""
    expected, stored = raw_rollups(store), stored_rollups(store)
    assert set(stored) == set(expected)
    for key, (n, total, total_sq, first) in expected.items():
        got = stored[key]
        assert got[0] == n, key
        if deleted:
            assert first - timedelta(seconds=key[2]) < got[3] <= first, key
        else:
            assert got[3] == first, key
        assert got[1] == pytest.approx(total, rel=1e-12, abs=1e-9), key
        assert got[2] == pytest.approx(total_sq, rel=1e-12, abs=1e-9), key


VALUES = (0.0, 0.25, 0.5, 0.75, 1.0, 1 / 3, 0.123456789, 0.555555, 0.99991, -0.0123, 1.7, None)


def random_verdicts(rng: random.Random, count: int, *, prefix: str,
                    base: datetime = NOW) -> list[VerdictRecord]:
    """Production verdicts over two hours of sample time, some judged days late, some with
    another purpose, attributes in either key order, by two judge models under two
    prompt versions."""
    records = []
    for i in range(count):
        sample_ts = base - timedelta(seconds=rng.uniform(0, 7200))
        late = rng.random() < 0.2
        app, route = f"app-{rng.randrange(4)}", f"/r{rng.randrange(2)}"
        attributes = {"app": app, "route": route} if rng.random() < 0.5 else {
            "route": route, "app": app}
        records.append(verdict(
            f"{prefix}-{i}", key=VerdictKey(f"{prefix}-{i}", "rag_qa", rng.choice(["p1", "p2"]),
                                            rng.choice(["judge-1", "judge-2"])),
            sample_ts=sample_ts,
            created_at=sample_ts + (rng.uniform(1, 3) * DAY if late else timedelta(seconds=5)),
            scores={"faithfulness": rng.choice(VALUES), "correct": float(rng.random() < 0.7)},
            attributes=attributes,
            purpose="production" if rng.random() < 0.9 else "calibration"))
    return records


@pytest.fixture
def rollup_store(any_store: SqlStore) -> Iterator[SqlStore]:
    """A store with day partitions for the last week on Postgres (late verdicts' days)."""
    with any_store.engine.begin() as conn:
        if is_partitioned(conn):
            ensure_partitions(conn, now=NOW, since=NOW - 45 * DAY)
    yield any_store


def test_saved_verdicts_late_ones_and_copies_are_counted_once(rollup_store: SqlStore) -> None:
    rng = random.Random(1)
    records = random_verdicts(rng, 300, prefix="a")
    for start in range(0, len(records), 37):
        rollup_store.save(verdicts=records[start:start + 37], owner="w")
    assert rollup_store.save(verdicts=records[:50], owner="w") == 0  # stored once, never twice
    canary = verdict("c-1", purpose="canary", canary_scores={"canary:faithfulness": 0.5})
    rollup_store.save(verdicts=[canary], owner="w")
    assert_exact(rollup_store)
    with rollup_store.engine.connect() as conn:
        levels = set(conn.execute(select(score_rollups.c.level)).scalars())
    assert {0, 630, 1260, 1890, 2520, 840, OFF_GRID} <= levels  # 1/3 is on the grid too
    assert any(level < OFF_GRID for level in levels)  # a minute's off-grid values, binned


def test_concurrent_writers_sum_exactly(rollup_store: SqlStore) -> None:
    rng = random.Random(2)
    batches = [random_verdicts(rng, 40, prefix=f"t{i}") for i in range(12)]
    save_at_once([(rollup_store, batches[i::4]) for i in range(4)])
    assert_exact(rollup_store)


def save_at_once(jobs: list[tuple[SqlStore, list[list[VerdictRecord]]]]) -> None:
    """Each job's batches saved by a thread of its own, the threads started together."""
    failures: list[BaseException] = []
    started = threading.Barrier(len(jobs))

    def save(store: SqlStore, mine: list[list[VerdictRecord]]) -> None:
        try:
            started.wait(timeout=60)
            for batch in mine:
                store.save(verdicts=batch, owner=threading.current_thread().name)
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=save, args=job) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not failures and not any(thread.is_alive() for thread in threads)


def test_a_purged_day_and_an_erased_sample_leave_the_rollups(rollup_store: SqlStore) -> None:
    rng = random.Random(3)
    old = random_verdicts(rng, 60, prefix="old", base=NOW - 40 * DAY)
    recent = random_verdicts(rng, 60, prefix="new")
    rollup_store.save(verdicts=old + recent, owner="w")
    report = Purger(rollup_store, RetentionPolicy(verdict_days=30), batch_rows=7).run(now=NOW)
    assert sum(report.verdicts_deleted.values()) > 0
    assert_exact(rollup_store, deleted=True)
    # An erasure done in the database: the sample's scores, then its verdict.
    with rollup_store.engine.begin() as conn:
        gone = conn.execute(select(verdicts.c.id).where(
            verdicts.c.sample_id == recent[0].key.sample_id)).scalar_one()
        conn.execute(delete(verdict_scores).where(verdict_scores.c.verdict_id == gone))
        conn.execute(delete(verdicts).where(verdicts.c.id == gone))
    assert_exact(rollup_store, deleted=True)


def test_a_dropped_day_partition_leaves_the_rollups(store: SqlStore) -> None:
    # Days after the test database's legacy partition, so they get partitions of their own.
    day = day_start(datetime.now(UTC)) + 20 * DAY
    with store.engine.begin() as conn:
        ensure_partitions(conn, now=day, since=day - 3 * DAY, days_ahead=1)
    rng = random.Random(6)
    store.save(verdicts=random_verdicts(rng, 50, prefix="d1", base=day - 2 * DAY + DAY / 2)
               + random_verdicts(rng, 50, prefix="d3", base=day + DAY / 2), owner="w")
    with store.engine.connect() as conn:
        names = set(conn.exec_driver_sql(
            "SELECT DISTINCT tableoid::regclass::text FROM verdicts").scalars())
    assert f"verdicts_{day_suffix(day - 2 * DAY)}" in names
    with store.engine.begin() as conn:
        drop_partition(conn, day_suffix(day - 2 * DAY))
    assert_exact(store, deleted=True)


def test_a_save_that_dies_mid_transaction_leaves_nothing(rollup_store: SqlStore) -> None:
    rng = random.Random(4)
    rollup_store.save(verdicts=random_verdicts(rng, 30, prefix="kept"), owner="w")
    before = stored_rollups(rollup_store)
    with pytest.raises(RuntimeError), rollup_store.engine.begin() as conn:
        rollup_store.save_rows(conn, random_verdicts(rng, 30, prefix="lost"), [], release=[],
                               owner="w")
        raise RuntimeError("the process dies before the commit")
    assert stored_rollups(rollup_store) == before
    assert_exact(rollup_store)


def test_rebuild_gives_what_the_triggers_kept(rollup_store: SqlStore) -> None:
    rollup_store.save(verdicts=random_verdicts(random.Random(5), 80, prefix="r"), owner="w")
    kept = stored_rollups(rollup_store)
    with rollup_store.engine.begin() as conn:
        assert rebuild(conn) > 0
    assert stored_rollups(rollup_store).keys() == kept.keys()
    assert_exact(rollup_store)


def test_hostile_attributes_are_keys_like_any_other(rollup_store: SqlStore) -> None:
    odd = ["a'b", 'q"uote', "ü\u202e", "x" * 2000, "{\"app\": 1}", "%s %(x)s", ":00"]
    rollup_store.save(verdicts=[
        verdict(f"h-{i}", attributes={"app": value, "k:ey": value})
        for i, value in enumerate(odd)], owner="w")
    assert_exact(rollup_store)
    assert len({key[4] for key in stored_rollups(rollup_store)}) == len(odd)


def test_writers_on_many_connections_spread_over_shards_and_sum_exactly(
        store: SqlStore, database_url: str) -> None:
    """Eight stores (a connection each) save one app's verdicts of the same minute at once:
    their rows spread over shards, the sums stay exact; erasing a sample subtracts it,
    folding leaves one row per key, and erasing everything leaves no row."""
    from evalfleet.store import open_store

    writers = [open_store(database_url, pool_size=1) for _ in range(8)]
    base = NOW.replace(second=30)
    rng = random.Random(9)

    def hot(name: str) -> VerdictRecord:
        return verdict(name, sample_ts=base + timedelta(milliseconds=rng.randrange(1000)),
                       created_at=base + timedelta(seconds=5), attributes={"app": "hot"},
                       scores={"faithfulness": rng.random()})

    batches = [[[hot(f"s{w}-{b}-{i}") for i in range(10)] for b in range(3)] for w in range(8)]
    save_at_once(list(zip(writers, batches, strict=True)))
    for writer in writers:
        writer.close()
    with store.engine.connect() as conn:
        shards = set(conn.execute(select(score_rollups.c.shard)).scalars())
    assert len(shards) > 1  # eight backends' pids, eight shards: all alike is 1 in 8^7
    assert_exact(store)
    with store.engine.begin() as conn:
        assert fold(conn, now=base) == 0  # the minute is not over: nothing folded
        assert fold(conn, now=base + 2 * timedelta(hours=1)) > 0
    with store.engine.connect() as conn:
        assert set(conn.execute(select(score_rollups.c.shard)).scalars()) == {0}
    assert_exact(store)
    store.save(verdicts=[hot("late")], owner="w")  # a late one, in this connection's shard
    with store.engine.begin() as conn:  # an erasure: the scores, then the verdict
        gone = conn.execute(select(verdicts.c.id).where(
            verdicts.c.sample_id == "s3-1-4")).scalar_one()
        conn.execute(delete(verdict_scores).where(verdict_scores.c.verdict_id == gone))
        conn.execute(delete(verdicts).where(verdicts.c.id == gone))
    assert_exact(store, deleted=True)
    with store.engine.begin() as conn:
        conn.execute(delete(verdict_scores))
    assert stored_rollups(store) == {}


def test_a_late_save_into_a_bucket_being_folded_does_not_deadlock(store: SqlStore) -> None:
    """A save holds its first rollup rows and waits for a later one (held here by a third
    transaction); the fold of that bucket starts meanwhile. The fold takes the rows in key
    order, as the save does, so it waits behind the save for its first row and holds none
    the save wants next: both finish, and the sums stay exact. (A fold deleting in scan
    order could take a later row first and wait for the save's: a deadlock; on this
    small table the old fold's plan happened to find them in key order.)"""
    base = NOW.replace(minute=17, second=30)  # a minute inside its hour: two buckets apart

    def late(name: str, scores: dict[str, float]) -> VerdictRecord:
        return verdict(name, sample_ts=base, created_at=base + timedelta(hours=3),
                       attributes={"app": "hot"}, scores=scores)

    writer = store.engine.connect()
    try:
        # The faithfulness rows first, so in the table they come before correct's.
        with writer.begin():
            store.save_rows(writer, [late("f", {"faithfulness": 0.5})], [], release=[],
                            owner="w")
            store.save_rows(writer, [late("c", {"correct": 1.0, "faithfulness": 0.5})], [],
                            release=[], owner="w")
        shard = int(writer.exec_driver_sql("SELECT mod(pg_backend_pid(), 8)").scalar_one())
        writer_pid = int(writer.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())
        writer.commit()
        with store.engine.connect() as blocker, blocker.begin():
            # The save's last row but one (its keys in order: correct's minute and hour,
            # faithfulness's minute and hour) is held, so the save waits holding correct's.
            blocker.exec_driver_sql(
                "SELECT 1 FROM score_rollups WHERE name = 'faithfulness' AND span_s = 60"
                f" AND shard = {shard} FOR UPDATE")
            saving = _in_thread(lambda: _save_in(store, writer, late(
                "s", {"correct": 0.0, "faithfulness": 0.5})))
            _wait_for_lock(store, writer_pid)
            folding = _in_thread(lambda: _fold_at(store, base + timedelta(hours=3)))
            _wait_for_lock(store, folding.pid())
        # The blocker is gone: the save goes on, commits, and the fold after it.
        saving.result()
        assert folding.result() > 0
    finally:
        writer.close()
    assert_exact(store)
    # Rows the save made (a new level) were not there for the fold: the next one takes them.
    with store.engine.begin() as conn:
        fold(conn, now=base + timedelta(hours=3))
    with store.engine.connect() as conn:
        assert set(conn.execute(select(score_rollups.c.shard)).scalars()) == {0}
    assert_exact(store)


def _save_in(store: SqlStore, conn: Any, record: VerdictRecord) -> int:
    with conn.begin():
        return store.save_rows(conn, [record], [], release=[], owner="w")


def _fold_at(store: SqlStore, now: datetime) -> int:
    with store.engine.begin() as conn:
        _Task.current().pid_found(int(conn.exec_driver_sql(
            "SELECT pg_backend_pid()").scalar_one()))
        return fold(conn, now=now)


class _Task:
    """A call run in a thread of its own: its result (or error), and its backend's pid."""

    _local = threading.local()

    def __init__(self, call: Any) -> None:
        self._call, self._done, self._pid = call, threading.Event(), threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None
        self._pid_value = 0
        self._thread = threading.Thread(target=self._run)

    @classmethod
    def current(cls) -> _Task:
        return cls._local.task  # type: ignore[no-any-return]

    def pid_found(self, pid: int) -> None:
        self._pid_value = pid
        self._pid.set()

    def pid(self) -> int:
        assert self._pid.wait(timeout=30)
        return self._pid_value

    def _run(self) -> None:
        _Task._local.task = self
        try:
            self._value = self._call()
        except BaseException as exc:  # raised again by result()
            self._error = exc
        finally:
            self._done.set()

    def result(self) -> Any:
        assert self._done.wait(timeout=60)
        self._thread.join(timeout=10)
        if self._error is not None:
            raise self._error
        return self._value


def _in_thread(call: Any) -> _Task:
    task = _Task(call)
    task._thread.start()
    return task


def _wait_for_lock(store: SqlStore, pid: int) -> None:
    """Until backend ``pid`` waits for a lock (bounded: 30 s)."""
    deadline = time.monotonic() + 30
    with store.engine.connect() as conn:
        while time.monotonic() < deadline:
            waiting = conn.exec_driver_sql(
                f"SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = {pid}"
            ).scalar()
            conn.rollback()  # a fresh snapshot of the activity each time
            if waiting:
                return
            time.sleep(0.01)
    raise AssertionError(f"backend {pid} never waited for a lock")
