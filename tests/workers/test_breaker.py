"""The circuit breaker's states and transitions."""

from __future__ import annotations

from workers.breaker import Admission, CircuitBreaker


def tripped(now_s: float = 0.0) -> CircuitBreaker:
    breaker = CircuitBreaker(failure_threshold=3, open_s=10, max_open_s=40)
    for _ in range(3):
        breaker.failed(now_s)
    return breaker


def test_closed_until_enough_failures_in_a_row() -> None:
    breaker = CircuitBreaker(failure_threshold=3)
    breaker.failed(0)
    breaker.failed(0)
    breaker.succeeded()
    breaker.failed(0)
    breaker.failed(0)
    assert breaker.state == "closed" and breaker.admit(0).allowed
    breaker.failed(0)
    assert breaker.state == "open"


def test_open_refuses_with_the_time_left() -> None:
    breaker = tripped()
    admission = breaker.admit(4.0)
    assert not admission.allowed and admission.wait_s == 6.0


def test_one_probe_after_the_pause() -> None:
    breaker = tripped()
    assert breaker.admit(10.0).allowed
    assert breaker.state == "half_open"
    assert not breaker.admit(10.1).allowed  # the probe is still out


def test_a_good_probe_closes() -> None:
    breaker = tripped()
    breaker.admit(10.0)
    breaker.succeeded()
    assert breaker.state == "closed" and breaker.admit(10.1).allowed


def test_a_bad_probe_reopens_for_longer_up_to_the_cap() -> None:
    breaker = tripped()
    pauses = []
    now = 10.0
    for _ in range(4):
        assert breaker.admit(now).allowed
        breaker.failed(now)
        wait = breaker.admit(now).wait_s
        pauses.append(wait)
        now += wait
    assert pauses == [20.0, 40.0, 40.0, 40.0]


def test_a_probe_that_never_reached_the_judge_lets_the_next_call_probe() -> None:
    breaker = tripped()
    probe = breaker.admit(10.0)
    assert probe.probe and not breaker.admit(10.1).allowed
    breaker.release(probe)  # deferred by the rate limiter, or cancelled
    assert breaker.admit(10.2).allowed and breaker.state == "half_open"


def test_releasing_a_call_that_was_not_the_probe_changes_nothing() -> None:
    breaker = tripped()
    probe = breaker.admit(10.0)
    breaker.release(Admission(True))
    assert not breaker.admit(10.1).allowed
    breaker.succeeded()
    breaker.release(probe)
    assert breaker.state == "closed"
