"""Putting queue readings and activity together: arrivals, failures, ages, JSON."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from evalfleet.broker.probe import QueueReading
from evalfleet.core.ratelimit import RateLimit
from evalfleet.ops.activity import Activity, JudgeCost
from evalfleet.ops.fleet_status import (
    arrival_rate,
    backlog_growth,
    build_status,
    failure_rates,
    status_json,
)

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def reading(*, at: datetime = NOW, waiting: int | None = 0, in_flight: int | None = 0,
            **changes: object) -> QueueReading:
    return QueueReading("eval.rag_qa", read_at=at, waiting_messages=waiting,
                        waiting_jobs=waiting, in_flight_messages=in_flight,
                        in_flight_jobs=in_flight, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(("earlier", "later", "between", "expected"), [
    # A steady backlog: 200 finished in 10 s, so 200 arrived.
    (reading(at=NOW - timedelta(seconds=10), waiting=100), reading(waiting=100), 200,
     (20.0, "completions + backlog change over 10 s")),
    # The backlog grew by 50 jobs as well.
    (reading(at=NOW - timedelta(seconds=10), waiting=100, in_flight=10),
     reading(waiting=140, in_flight=20), 200, (25.0, "completions + backlog change over 10 s")),
    # It shrank by more than finished (jobs deleted by hand): never negative.
    (reading(at=NOW - timedelta(seconds=10), waiting=1000), reading(waiting=0), 200,
     (0.0, "completions + backlog change over 10 s")),
    # Without two readings of a known backlog: the window's completion rate.
    (None, reading(waiting=5), None, (7.0, "window completions (backlog change unknown)")),
    (reading(waiting=None), reading(waiting=None), 3,
     (7.0, "window completions (backlog change unknown)")),
    (reading(waiting=5), reading(waiting=9), 0, (7.0, "window completions (one reading)")),
])
def test_arrival_rate(earlier: QueueReading | None, later: QueueReading, between: int | None,
                      expected: tuple[float, str]) -> None:
    rate, basis = arrival_rate(completed_per_s=7.0, completed_between=between,
                               earlier=earlier, later=later)
    assert (pytest.approx(rate), basis) == expected


def test_sampled_counts_grow_by_messages_not_by_the_samples_mix() -> None:
    # 1,000 messages both times; the sample saw batches of 16 first, of 10 later (the old
    # batches were consumed). Nothing was added or removed in between: no growth.
    earlier = QueueReading("eval.rag_qa", read_at=NOW - timedelta(seconds=5),
                           waiting_messages=1000, waiting_jobs=16000, waiting_exact=False,
                           in_flight_jobs=32)
    later = QueueReading("eval.rag_qa", read_at=NOW, waiting_messages=1000,
                         waiting_jobs=10000, waiting_exact=False, in_flight_jobs=32)
    assert backlog_growth(earlier, later) == 0
    grown = QueueReading("eval.rag_qa", read_at=NOW, waiting_messages=1050,
                         waiting_jobs=10500, waiting_exact=False, in_flight_jobs=48)
    assert backlog_growth(earlier, grown) == 50 * 10 + 16
    rate, _ = arrival_rate(completed_per_s=0.0, completed_between=100, earlier=earlier,
                           later=grown)
    assert rate == pytest.approx((100 + 516) / 5)


def test_failure_rates_cover_failed_verdicts_and_dead_letters() -> None:
    activity = Activity("rag_qa", verdicts=90, failed={"schema": 6, "truncated": 2},
                        dead_letters={"judge_unavailable": 10})
    rates = failure_rates(activity, window_s=100.0)
    assert [(r.error_class, r.outcome, r.count) for r in rates] == [
        ("judge_unavailable", "dead_letter", 10), ("schema", "failed", 6),
        ("truncated", "failed", 2)]
    assert rates[0].share == pytest.approx(0.1) and rates[0].per_s == pytest.approx(0.1)
    assert failure_rates(Activity("rag_qa"), window_s=100.0) == ()


def test_a_backed_up_queue() -> None:
    judge = JudgeCost(latency_s=0.5, calls_per_job=1.0, tokens_per_call=None, basis="window")
    activity = {"rag_qa": Activity("rag_qa", verdicts=3000, lag_mean_s=40.0, lag_max_s=90.0,
                                   judge=judge)}
    status = build_status(
        at=NOW, window_s=300.0, concurrency=8, drain_s=600.0,
        readings={"rag_qa": reading(waiting=12_000, in_flight=32,
                                    oldest_enqueued_at=NOW - timedelta(minutes=3))},
        earlier={"rag_qa": reading(at=NOW - timedelta(seconds=60), waiting=6_000,
                                   in_flight=32)},
        completed_between={"rag_qa": 600}, activity=activity, models={"rag_qa": "judge-1"},
        limits={})
    (queue,) = status.queues
    # 600 done in the last minute and the backlog grew by 6,000: 110 jobs arrive a
    # second, 55 calls in flight.
    assert queue.completed_per_s == pytest.approx(10.0)
    assert queue.arrival_per_s == pytest.approx(110.0)
    assert queue.oldest_age_s == 180.0
    assert queue.recommendation.workers == 7                 # 55 / 8
    # Draining 12,032 jobs in 600 s adds 20 jobs/s: 65 calls, 9 workers.
    assert queue.recommendation.drain_workers == 9
    encoded = json.loads(json.dumps(status_json(status)))
    assert encoded["at"] == "2026-11-22T12:00:00Z"
    assert {key: encoded["queues"][0][key] for key in (
        "queue", "waiting_jobs", "in_flight_jobs", "oldest_job_age_s", "recommended_workers",
        "drain_workers", "lag_mean_s", "judge_latency_s")} == {
        "queue": "eval.rag_qa", "waiting_jobs": 12_000, "in_flight_jobs": 32,
        "oldest_job_age_s": 180.0, "recommended_workers": 7, "drain_workers": 9,
        "lag_mean_s": 40.0, "judge_latency_s": 0.5}


def test_an_unknown_depth_and_no_verdicts_make_no_guesses() -> None:
    status = build_status(
        at=NOW, window_s=300.0, concurrency=8, drain_s=600.0,
        readings={"rag_qa": QueueReading("eval.rag_qa", read_at=NOW, note="embedded broker")},
        earlier={}, completed_between={}, activity={"rag_qa": Activity("rag_qa")},
        models={"rag_qa": "m"}, limits={"m": RateLimit(600, None)})
    encoded = status_json(status)["queues"][0]
    assert encoded["waiting_jobs"] is None and encoded["in_flight_jobs"] is None
    assert encoded["queue_note"] == "embedded broker"
    assert encoded["recommended_workers"] is None
    assert encoded["recommendation_note"] == "judge latency unknown: no verdicts yet"


def test_a_metric_without_verdicts_borrows_the_judge_figures_of_its_model() -> None:
    judge = JudgeCost(latency_s=0.5, calls_per_job=1.0, tokens_per_call=None, basis="window")
    status = build_status(
        at=NOW, window_s=300.0, concurrency=8, drain_s=600.0,
        readings={"rag_qa": reading(waiting=0), "bbh_match": reading(waiting=2_400),
                  "context_precision": reading(waiting=2_400),
                  "rec_faithfulness": reading(waiting=0)},
        earlier={}, completed_between={},
        activity={"rag_qa": Activity("rag_qa", verdicts=300, judge=judge),
                  "bbh_match": Activity("bbh_match"),
                  "context_precision": Activity("context_precision"),
                  "rec_faithfulness": Activity("rec_faithfulness")},
        models={"rag_qa": "judge-1", "bbh_match": "judge-1", "context_precision": "judge-2",
                "rec_faithfulness": "judge-1"},
        limits={})
    rag_qa, bbh_match, context_precision, idle = status.queues
    assert bbh_match.judge is not None and bbh_match.judge.latency_s == 0.5
    assert bbh_match.judge.basis == "rag_qa (same judge model)"
    # 2,400 jobs in 600 s at 0.5 s a call: 2 calls in flight, one worker.
    assert bbh_match.recommendation.drain_workers == 1
    assert bbh_match.recommendation.reason is None
    # No metric of judge-2 was measured: no figure, but its backlog needs a worker.
    assert context_precision.judge is None
    assert context_precision.recommendation.workers is None
    assert context_precision.recommendation.drain_workers == 1
    assert rag_qa.judge is judge
    # An idle queue borrows nothing and needs nobody.
    assert idle.judge is None and idle.recommendation.drain_workers == 0
