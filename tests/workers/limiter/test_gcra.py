"""GCRA arithmetic: spacing, burst, waiting, refunds."""

from __future__ import annotations

import pytest

from workers.limiter.gcra import interval_for, plan, refund


def test_unused_limit_lets_a_call_go_now() -> None:
    planned = plan(tat_s=None, now_s=100.0, cost=1, interval_s=0.5, burst_s=0.0)
    assert planned.tat_s == 100.5 and planned.wait_s == 0.0


def test_burst_lets_a_call_go_early() -> None:
    assert plan(tat_s=100.5, now_s=100.0, cost=1, interval_s=0.5, burst_s=0.5).wait_s == 0.0
    assert plan(tat_s=100.5, now_s=100.0, cost=1, interval_s=0.5, burst_s=0.0).wait_s == 0.5


def test_calls_are_spaced_at_the_limit() -> None:
    tat, waits = None, []
    for _ in range(5):
        planned = plan(tat_s=tat, now_s=0.0, cost=1, interval_s=0.2, burst_s=0.2)
        tat, waits = planned.tat_s, [*waits, planned.wait_s]
    assert waits == pytest.approx([0.0, 0.0, 0.2, 0.4, 0.6])


def test_an_old_tat_does_not_bank_credit() -> None:
    planned = plan(tat_s=10.0, now_s=100.0, cost=1, interval_s=1.0, burst_s=0.0)
    assert planned.tat_s == 101.0


def test_tokens_cost_in_proportion() -> None:
    first = plan(tat_s=None, now_s=0.0, cost=600, interval_s=60 / 60_000, burst_s=0.0)
    second = plan(tat_s=first.tat_s, now_s=0.0, cost=1, interval_s=60 / 60_000, burst_s=0.0)
    assert first.wait_s == 0.0 and second.wait_s == pytest.approx(0.6)


@pytest.mark.parametrize(("tat", "units", "expected"), [
    (110.0, 5, 105.0),      # give back 5 units of 1 s
    (110.0, 20, 100.0),     # never before now
    (110.0, -5, 115.0),     # charge more
    (None, 5, None),        # nothing to correct
])
def test_refund(tat: float | None, units: float, expected: float | None) -> None:
    assert refund(tat_s=tat, now_s=100.0, units=units, interval_s=1.0) == expected


def test_interval_for() -> None:
    assert interval_for(120) == 0.5
    assert interval_for(None) == 0.0
