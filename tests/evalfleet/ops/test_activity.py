"""Recent activity from the verdict store, on both backends."""

from __future__ import annotations

from datetime import timedelta

import pytest

from evalfleet.ops.activity import count_completed, read_activity
from evalfleet.store import SqlStore
from tests.evalfleet.ops.builders import NOW, dead_letter, verdict

WINDOW = {"since": NOW - timedelta(minutes=5), "until": NOW + timedelta(seconds=1)}


def test_verdicts_failures_lag_and_judge_cost(any_store: SqlStore) -> None:
    any_store.save(verdicts=[
        verdict("a", sample_ts=NOW - timedelta(seconds=10)),
        verdict("b", sample_ts=NOW - timedelta(seconds=50), attempts=2, latency_ms=3000),
        verdict("c", status="failed", error_class="schema", error="bad", scores={},
                prompt_tokens=None, completion_tokens=None),
        verdict("old", created_at=NOW - timedelta(hours=1)),           # outside the window
        verdict("other", metric="bbh_match"),
    ], dead_letters=[dead_letter("d"), dead_letter("e", error_class="judge_rejected"),
                     dead_letter("f", created_at=NOW - timedelta(hours=1))], owner="t")
    found = read_activity(any_store, metrics=["rag_qa", "context_precision"], **WINDOW)
    rag = found["rag_qa"]
    assert (rag.verdicts, rag.failed, rag.completed) == (3, {"schema": 1}, 5)
    assert rag.dead_letters == {"judge_unavailable": 1, "judge_rejected": 1}
    assert rag.lag_mean_s == pytest.approx((10 + 50 + 30) / 3, abs=0.01)
    assert rag.lag_max_s == pytest.approx(50, abs=0.01)
    assert rag.judge is not None and rag.judge.basis == "window"
    # Measured on the verdicts of one call: "b" took 2 attempts, and its 3 s may be one
    # call after a failed delivery or a call and a re-ask.
    assert rag.judge.latency_s == pytest.approx(0.5)
    assert rag.judge.calls_per_job == pytest.approx(4 / 3)
    assert rag.judge.tokens_per_call == pytest.approx(2000 / 3)  # metered verdicts only
    assert found["context_precision"].completed == 0
    assert found["context_precision"].judge is None


def test_a_stalled_metric_takes_its_judge_cost_from_recent_verdicts(
        any_store: SqlStore) -> None:
    any_store.save(verdicts=[verdict(f"s{n}", created_at=NOW - timedelta(hours=2),
                                     latency_ms=2000) for n in range(3)], owner="t")
    rag = read_activity(any_store, metrics=["rag_qa"], **WINDOW)["rag_qa"]
    assert rag.verdicts == 0 and rag.lag_mean_s is None
    assert rag.judge is not None and rag.judge.basis == "recent"
    assert rag.judge.latency_s == pytest.approx(2.0)


def test_completed_jobs_between_two_readings(any_store: SqlStore) -> None:
    any_store.save(verdicts=[verdict("a"), verdict("b", created_at=NOW - timedelta(minutes=2)),
                             verdict("c", metric="bbh_match")],
                   dead_letters=[dead_letter("d"), dead_letter("e", metric="other")], owner="t")
    assert count_completed(any_store, metrics=["rag_qa", "bbh_match", "context_precision"],
                           since=NOW - timedelta(minutes=1), until=NOW + timedelta(seconds=1)
                           ) == {"rag_qa": 2, "bbh_match": 1, "context_precision": 0}


def test_without_single_call_verdicts_latency_is_shared_by_attempts(
        any_store: SqlStore) -> None:
    any_store.save(verdicts=[verdict("a", attempts=2, latency_ms=3000),
                             verdict("b", attempts=3, latency_ms=3000)], owner="t")
    judge = read_activity(any_store, metrics=["rag_qa"], **WINDOW)["rag_qa"].judge
    assert judge is not None and judge.latency_s == pytest.approx((1.5 + 1.0) / 2)
    assert judge.calls_per_job == pytest.approx(2.5)
