"""Little's law and rate-limit caps, as tables."""

from __future__ import annotations

import pytest

from evalfleet.core.ratelimit import RateLimit
from evalfleet.ops.capacity import (
    Demand,
    Recommendation,
    calls_in_flight,
    caps_in_flight,
    recommend,
    recommend_fleet,
    share,
    workers_for,
)


@pytest.mark.parametrize(("jobs_per_s", "calls_per_job", "latency_s", "expected"), [
    (100.0, 1.0, 0.5, 50.0),      # Little's law: 100 jobs/s at 500 ms hold 50 calls
    (100.0, 1.5, 0.5, 75.0),      # re-asks: half the jobs need a second call
    (0.0, 1.0, 2.0, 0.0),
    (-5.0, 1.0, 2.0, 0.0),        # a shrinking estimate never asks for negative calls
])
def test_calls_in_flight(jobs_per_s: float, calls_per_job: float, latency_s: float,
                         expected: float) -> None:
    assert calls_in_flight(jobs_per_s=jobs_per_s, calls_per_job=calls_per_job,
                           latency_s=latency_s) == pytest.approx(expected)


@pytest.mark.parametrize(("calls", "concurrency", "expected"), [
    (0.0, 256, 0),
    (1.0, 256, 1),
    (256.0, 256, 1),
    (256.0000000001, 256, 1),     # float noise does not buy a worker
    (257.0, 256, 2),
    (0.1 * 3 * 256 / 0.3, 256, 1),
])
def test_workers_for_rounds_up(calls: float, concurrency: int, expected: int) -> None:
    assert workers_for(calls, concurrency=concurrency) == expected


def test_workers_for_needs_a_positive_concurrency() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        workers_for(10, concurrency=0)


@pytest.mark.parametrize(("demands", "total", "expected"), [
    ({"a": 1.0, "b": 3.0}, 100.0, {"a": 25.0, "b": 75.0}),
    ({"a": 0.0, "b": 0.0}, 10.0, {"a": 5.0, "b": 5.0}),
    ({"a": 2.0}, None, {"a": None}),
    ({"a": -1.0, "b": 1.0}, 8.0, {"a": 0.0, "b": 8.0}),
])
def test_share(demands: dict[str, float], total: float | None,
               expected: dict[str, float | None]) -> None:
    assert share(demands, total) == pytest.approx(expected)


@pytest.mark.parametrize(("demand", "cap", "expected"), [
    # 100 jobs/s x 0.5 s = 50 calls; at 256 per worker: 1; backlog 90,000 in 900 s
    # adds 100 jobs/s: 100 calls, still 1.
    (Demand(100.0, backlog_jobs=90_000, latency_s=0.5), None,
     Recommendation(1, 1, calls_in_flight=50.0)),
    # 1,000 jobs/s at 0.5 s: 500 calls, 2 workers; with the backlog 1,100/s: 550, 3.
    (Demand(1000.0, backlog_jobs=90_000, latency_s=0.5), None,
     Recommendation(2, 3, calls_in_flight=500.0)),
    # A cap of 300 calls in flight: 2 workers to keep up, and no more to drain.
    (Demand(1000.0, backlog_jobs=90_000, latency_s=0.5), 300.0,
     Recommendation(2, 2, calls_in_flight=500.0, cap_calls_in_flight=300.0,
                    rate_limited=True)),
    # Re-asks double the calls.
    (Demand(300.0, latency_s=1.0, calls_per_job=2.0), None,
     Recommendation(3, 3, calls_in_flight=600.0)),
    (Demand(0.0, latency_s=1.0), None, Recommendation(0, 0, calls_in_flight=0.0)),
    # Unmeasured: no figure to keep up, but a queue with work needs one worker to start.
    (Demand(10.0, backlog_jobs=5), None,
     Recommendation(None, 1, reason="judge latency unknown: no verdicts yet; "
                                    "start 1 worker to measure it")),
    # Nothing arrives and nothing waits: no worker, whatever the latency.
    (Demand(0.0), None, Recommendation(0, 0, calls_in_flight=0.0)),
    (Demand(0.0, backlog_jobs=None), None,
     Recommendation(None, None, reason="judge latency unknown: no verdicts yet")),
])
def test_recommend(demand: Demand, cap: float | None, expected: Recommendation) -> None:
    assert recommend(demand, concurrency=256, cap_calls=cap, drain_s=900.0) == expected


def test_requests_per_minute_cap_calls_in_flight() -> None:
    # 3000 RPM = 50 calls/s; at 0.5 s a call the fleet holds at most 25 in flight.
    caps = caps_in_flight({"q": Demand(200.0, latency_s=0.5)}, RateLimit(3000, None),
                          drain_s=900)
    assert caps == {"q": pytest.approx(25.0)}


def test_tokens_per_minute_cap_through_tokens_per_call() -> None:
    # 600,000 TPM at 1,000 tokens a call: 10 calls/s, 20 in flight at 2 s.
    demand = Demand(50.0, latency_s=2.0, tokens_per_call=1000.0)
    assert caps_in_flight({"q": demand}, RateLimit(None, 600_000), drain_s=900) == {
        "q": pytest.approx(20.0)}
    # The tighter of both limits wins; without token figures only RPM counts.
    assert caps_in_flight({"q": demand}, RateLimit(300, 600_000), drain_s=900) == {
        "q": pytest.approx(10.0)}
    bare = Demand(50.0, latency_s=2.0)
    assert caps_in_flight({"q": bare}, RateLimit(None, 600_000), drain_s=900) == {"q": None}


def test_queues_of_one_model_share_its_limit() -> None:
    # 6000 RPM = 100 calls/s for the model; a asks for 150/s, b for 50/s.
    demands = {"a": Demand(150.0, latency_s=1.0), "b": Demand(50.0, latency_s=2.0),
               "c": Demand(500.0, latency_s=1.0)}
    advice = recommend_fleet(demands, models={"a": "m1", "b": "m1", "c": "m2"},
                             limits={"m1": RateLimit(6000, None)}, concurrency=10,
                             drain_s=900.0)
    assert advice["a"].cap_calls_in_flight == pytest.approx(75.0)   # 75 calls/s x 1 s
    assert advice["b"].cap_calls_in_flight == pytest.approx(50.0)   # 25 calls/s x 2 s
    assert (advice["a"].workers, advice["b"].workers) == (8, 5)
    assert advice["a"].rate_limited and advice["b"].rate_limited
    # Another model's queue is not limited by m1's budget.
    assert advice["c"] == Recommendation(50, 50, calls_in_flight=500.0)
