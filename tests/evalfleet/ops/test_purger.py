"""Retention on the real stores: deletes with their scores, emptied raw outputs, batches."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from evalfleet.ops.purger import Purger
from evalfleet.ops.retention import RetentionPolicy
from evalfleet.store import SqlStore, VerdictKey
from evalfleet.store.finality import mark_pending
from evalfleet.store.schema import pending_finals, retention_marks, verdict_scores
from tests.evalfleet.ops.builders import NOW, verdict

DAY = timedelta(days=1)

# Its transaction counts include one per expired day partition.
pytestmark = pytest.mark.usefixtures("migrated_partitions_only")


def aged(store: SqlStore, days: list[float], *, metric: str = "rag_qa") -> None:
    """One verdict per age; several share a creation time when ages repeat."""
    store.save(verdicts=[verdict(f"{metric}-{n}", metric=metric, created_at=NOW - age * DAY)
                         for n, age in enumerate(days)], owner="t")


def state(store: SqlStore) -> list[tuple[str, bool, bool]]:
    """(sample id, has raw output, has error) of every verdict, oldest first."""
    return [(r.key.sample_id, r.raw_output is not None, r.error is not None)
            for r in store.iter_verdicts()]


def scores(store: SqlStore) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(verdict_scores)).scalar_one())


def test_old_verdicts_go_with_their_scores(any_store: SqlStore) -> None:
    aged(any_store, [40, 31, 31, 31, 31, 29, 1])
    aged(any_store, [35, 2], metric="bbh_match")
    purger = Purger(any_store, RetentionPolicy(verdict_days=30), batch_rows=2)
    dry = purger.run(now=NOW, dry_run=True)
    assert dry.verdicts_deleted == {"bbh_match": 1, "rag_qa": 5} and scores(any_store) == 18
    report = purger.run(now=NOW)
    assert report.verdicts_deleted == {"bbh_match": 1, "rag_qa": 5}
    # rag_qa: 2 + 2 + 1 rows, then an empty check is not needed; bbh_match: 1.
    assert report.transactions == 4
    assert [row[0] for row in state(any_store)] == ["rag_qa-5", "bbh_match-1", "rag_qa-6"]
    assert scores(any_store) == 6  # two per remaining verdict
    assert purger.run(now=NOW).verdicts_deleted == {"bbh_match": 0, "rag_qa": 0}


def test_raw_outputs_are_emptied_and_scores_kept(any_store: SqlStore) -> None:
    aged(any_store, [20, 10, 10, 10, 8, 3])
    any_store.save(verdicts=[verdict("failed", status="failed", error_class="schema",
                                     error="bad", raw_output=None, scores={},
                                     created_at=NOW - 9 * DAY)], owner="t")
    purger = Purger(any_store, RetentionPolicy(raw_output_days=7), batch_rows=2)
    assert purger.run(now=NOW, dry_run=True).raw_outputs_emptied == {"rag_qa": 6}
    assert purger.run(now=NOW).raw_outputs_emptied == {"rag_qa": 6}
    assert state(any_store) == [
        ("rag_qa-0", False, False), ("rag_qa-1", False, False), ("rag_qa-2", False, False),
        ("rag_qa-3", False, False), ("failed", False, False), ("rag_qa-4", False, False),
        ("rag_qa-5", True, False)]
    assert scores(any_store) == 12
    # The next run starts where this one stopped: three days on, one more has aged.
    with any_store.engine.connect() as conn:
        mark = conn.execute(select(retention_marks.c.done_until)).scalar_one()
    assert mark.replace(tzinfo=None) == (NOW - 7 * DAY).replace(tzinfo=None)
    assert purger.run(now=NOW + 5 * DAY).raw_outputs_emptied == {"rag_qa": 1}
    assert state(any_store)[-1] == ("rag_qa-5", False, False)


def test_both_at_once_and_nothing_without_a_policy(any_store: SqlStore) -> None:
    aged(any_store, [100, 50, 5])
    assert Purger(any_store, RetentionPolicy()).run(now=NOW).transactions == 0
    report = Purger(any_store, RetentionPolicy(verdict_days=90, raw_output_days=30)).run(
        now=NOW)
    assert (report.verdicts_deleted, report.raw_outputs_emptied) == ({"rag_qa": 1},
                                                                     {"rag_qa": 1})
    assert state(any_store) == [("rag_qa-1", False, False), ("rag_qa-2", True, False)]


def test_final_marks_whose_verdicts_never_came_go_after_the_verdict_cut_off(
        any_store: SqlStore) -> None:
    old, recent = (VerdictKey(f"s-{n}", "session_quality", "v1", "m") for n in (1, 2))
    with any_store.begin() as conn:
        mark_pending(conn, [old], now=NOW - 31 * DAY, insert=any_store.insert)
        mark_pending(conn, [recent], now=NOW - DAY, insert=any_store.insert)
    purger = Purger(any_store, RetentionPolicy(verdict_days=30))
    assert purger.run(now=NOW, dry_run=True).pending_finals_forgotten == 1
    report = purger.run(now=NOW)
    assert (report.pending_finals_forgotten, report.transactions) == (1, 1)
    with any_store.connect() as conn:
        kept = conn.execute(select(pending_finals.c.sample_id)).scalars().all()
    assert kept == ["s-2"]
    assert Purger(any_store, RetentionPolicy()).run(now=NOW).pending_finals_forgotten == 0
