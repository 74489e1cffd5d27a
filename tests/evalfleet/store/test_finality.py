"""Provisional session verdicts, on Postgres and on the embedded SQLite store: stored
with their scores in the verdict but out of the series alerts and corrected estimates
read (score rows, rollups) until marked final, then counted once."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import select

from evalfleet.alerts.window import WindowQuery, fetch_summaries
from evalfleet.core.review_slice import MetricSlice, ReviewSlice
from evalfleet.store import SqlStore, VerdictKey, VerdictRecord, open_store
from evalfleet.store.finality import mark_pending
from evalfleet.store.queries.estimate import EstimateReads
from evalfleet.store.queries.review_queue import ReviewQueue
from evalfleet.store.schema import pending_finals
from tests.evalfleet.ops.builders import NOW, verdict
from tests.evalfleet.store.test_rollup import assert_exact

START, END = NOW - timedelta(hours=3), NOW + timedelta(hours=1)
METRIC = "conversation_goal_completion"


def session_verdict(sample_id: str, value: float, *, provisional: bool) -> VerdictRecord:
    return verdict(sample_id, metric=METRIC, scores={"goal_completion": value},
                   provisional=provisional,
                   sample_ts=NOW - timedelta(minutes=90, seconds=17))


def counted(store: SqlStore) -> tuple[int, int]:
    """What the alert engine's window (rollups and score rows) and the corrected
    estimate's sums count of the metric's score."""
    query = WindowQuery(METRIC, "goal_completion", ())
    with store.engine.connect() as conn:
        window = fetch_summaries(conn, query, start=START, end=END)
    sums = EstimateReads(store).score_sums(metric=METRIC, score="goal_completion",
                                           start=START, end=END, segment={})
    whole = sum(summary.n for summary in window.values())
    return whole, sums.n


def test_a_provisional_verdict_counts_only_once_marked_final(any_store: SqlStore) -> None:
    final = session_verdict("conv-1#2-aaaaaaaaaaaa", 1.0, provisional=False)
    idle = session_verdict("conv-2#3-bbbbbbbbbbbb", 0.0, provisional=True)
    replaced = session_verdict("conv-3#1-cccccccccccc", 0.0, provisional=True)
    assert any_store.save(verdicts=[final, idle, replaced], owner="w") == 3
    assert counted(any_store) == (1, 1)
    stored = {r.key.sample_id: r for r in any_store.iter_verdicts(metric=METRIC)}
    assert stored[idle.key.sample_id].provisional and stored[idle.key.sample_id].scores == {
        "goal_completion": 0.0}  # the page and the export still show it
    assert not stored[final.key.sample_id].provisional
    assert_exact(any_store)

    assert any_store.finalise([idle.key, final.key,
                               VerdictKey("no-such#1-x", METRIC, "p1", "judge-1")]) == 1
    assert counted(any_store) == (2, 2)
    assert not next(r for r in any_store.iter_verdicts(metric=METRIC)
                    if r.key == idle.key).provisional
    assert_exact(any_store)
    # Marked once: a second job for the same final version adds nothing.
    assert any_store.finalise([idle.key]) == 0
    # The same version saved again (a redelivered idle job) is no second verdict.
    assert any_store.save(verdicts=[idle], owner="w") == 0
    assert counted(any_store) == (2, 2)
    assert_exact(any_store)


def test_workers_finalising_one_verdict_at_once_count_it_once(any_store: SqlStore) -> None:
    records = [session_verdict(f"conv-{n}#2-{n:012x}", 0.5, provisional=True)
               for n in range(40)]
    any_store.save(verdicts=records, owner="w")
    marked: list[int] = []
    errors: list[BaseException] = []

    def finalise() -> None:
        try:
            marked.append(any_store.finalise([r.key for r in records]))
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=finalise) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == [] and not any(thread.is_alive() for thread in threads)
    assert sum(marked) == 40
    assert counted(any_store) == (40, 40)
    assert_exact(any_store)


@pytest.mark.parametrize("purpose", ["calibration", "shadow"])
def test_finalising_a_verdict_of_another_purpose_writes_no_score(any_store: SqlStore,
                                                                  purpose: str) -> None:
    record = session_verdict("conv-9#1-dddddddddddd", 1.0, provisional=True)
    any_store.save(verdicts=[VerdictRecord(**{**record.__dict__, "purpose": purpose})],
                   owner="w")
    assert any_store.finalise([record.key]) == 1
    assert counted(any_store) == (0, 0)


def test_a_provisional_verdicts_review_item_joins_the_estimate_once_final(
        any_store: SqlStore) -> None:
    worker = open_store(any_store.engine.url.render_as_string(hide_password=False),
                        pool_size=1, review=ReviewSlice({METRIC: MetricSlice(rate=1.0)}))
    final = session_verdict("conv-1#2-aaaaaaaaaaaa", 1.0, provisional=False)
    idle = session_verdict("conv-2#3-bbbbbbbbbbbb", 0.0, provisional=True)
    worker.save(verdicts=[final, idle], owner="w")
    worker.close()
    reads = EstimateReads(any_store)

    def pooled() -> list[str]:
        return sorted(item.sample_id for item in reads.pool_items(
            metric=METRIC, start=START, end=END))

    assert pooled() == [final.key.sample_id]  # queued for review, not yet in the pool
    assert [item.sample_id for item in ReviewQueue(any_store).iter_items(metric=METRIC)
            if item.sample_id == idle.key.sample_id]
    any_store.finalise([idle.key])
    assert pooled() == sorted([final.key.sample_id, idle.key.sample_id])


def pending_keys(store: SqlStore) -> list[str]:
    with store.engine.connect() as conn:
        return sorted(conn.execute(select(pending_finals.c.sample_id)).scalars())


def test_a_final_job_before_its_verdict_makes_the_later_save_final(
        any_store: SqlStore) -> None:
    idle = session_verdict("conv-4#2-eeeeeeeeeeee", 0.25, provisional=True)
    # The final job comes while a batch (or the queue) still holds the idle version.
    assert any_store.finalise([idle.key]) == 0
    assert pending_keys(any_store) == [idle.key.sample_id]
    assert any_store.save(verdicts=[idle], owner="w") == 1
    assert not next(iter(any_store.iter_verdicts(metric=METRIC))).provisional
    assert counted(any_store) == (1, 1) and pending_keys(any_store) == []
    assert_exact(any_store)
    # The check-metric path (claim and save in one transaction) looks as well.
    other = session_verdict("conv-5#1-ffffffffffff", 0.75, provisional=True)
    any_store.finalise([other.key])
    any_store.claim_and_save([other.key], owner="w", lease_s=60, now=NOW,
                             settle=lambda claims: [other])
    assert counted(any_store) == (2, 2) and pending_keys(any_store) == []
    assert_exact(any_store)


def test_a_save_killed_before_its_look_is_made_final_by_the_next_look(
        any_store: SqlStore) -> None:
    idle = session_verdict("conv-6#3-abcabcabcabc", 0.5, provisional=True)
    # The final job's mark committed, the save committed, the saver killed before its
    # look: the verdict is provisional with its key pending ...
    with any_store.begin() as conn:
        mark_pending(conn, [idle.key], now=NOW, insert=any_store.insert)
    any_store._save_rows([idle], [], release=[], owner="w", one_by_one=False,
                         on_rejected=None)
    assert counted(any_store) == (0, 0) and pending_keys(any_store) == [idle.key.sample_id]
    # ... until its job, delivered again, finds the verdict stored and looks.
    assert any_store.finalise_pending([idle.key]) == 1
    assert counted(any_store) == (1, 1) and pending_keys(any_store) == []
    assert any_store.finalise_pending([idle.key]) == 0
    assert_exact(any_store)
