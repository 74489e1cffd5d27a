"""Fault decisions, latency draws, the rpm window and scripts."""

from __future__ import annotations

import random
import statistics
from collections import Counter
from typing import Any

import pytest

from evalfleet.judgesim import (
    MALFORMED_KINDS,
    Fault,
    InvalidScript,
    Script,
    SimConfig,
    SlidingWindow,
    decide_fault,
    first_answer_fault,
    lognormal_sigma,
    retry_after_header,
    sample_latency_ms,
)


def config(**values: Any) -> SimConfig:
    return SimConfig.build(values)


def draw_faults(cfg: SimConfig, count: int, seed: int = 7) -> list[Fault]:
    rng = random.Random(seed)
    return [decide_fault(rng, config=cfg) for _ in range(count)]


@pytest.mark.parametrize(("rates", "outcome"), [
    ({}, "ok"),
    ({"rate_limit_rate": 1.0}, "rate_limited"),
    ({"server_error_rate": 1.0}, "server_error"),
    ({"hang_rate": 1.0}, "hang"),
    ({"malformed_rate": 1.0}, "malformed"),
    ({"truncated_rate": 1.0}, "truncated"),
])
def test_a_rate_of_one_always_gives_that_fault(rates: dict[str, float], outcome: str) -> None:
    assert {fault.outcome for fault in draw_faults(config(**rates), 200)} == {outcome}


def test_faults_follow_their_rates() -> None:
    rates = {"rate_limit_rate": 0.1, "server_error_rate": 0.05, "hang_rate": 0.05,
             "malformed_rate": 0.2, "truncated_rate": 0.1}
    counts = Counter[str](fault.outcome for fault in draw_faults(config(**rates), 20_000))
    expected = {"rate_limited": 0.1, "server_error": 0.05, "hang": 0.05, "malformed": 0.2,
                "truncated": 0.1, "ok": 0.5}
    for outcome, share in expected.items():
        assert counts[outcome] / 20_000 == pytest.approx(share, abs=0.015)


def test_the_same_seed_gives_the_same_faults() -> None:
    cfg = config(malformed_rate=0.3, truncated_rate=0.3, server_error_rate=0.1)
    assert draw_faults(cfg, 500, seed=3) == draw_faults(cfg, 500, seed=3)
    assert draw_faults(cfg, 500, seed=3) != draw_faults(cfg, 500, seed=4)


@pytest.mark.parametrize(("kinds", "expected"), [
    (MALFORMED_KINDS, set(MALFORMED_KINDS)),
    (("single_quotes",), {"single_quotes"}),
    (("missing_brace", "trailing_comma"), {"missing_brace", "trailing_comma"}),
])
def test_malformed_kinds_are_drawn_from_the_configured_ones(kinds: tuple[str, ...],
                                                            expected: set[str]) -> None:
    faults = draw_faults(config(malformed_rate=1.0, malformed_kinds=kinds), 600)
    assert {fault.malformed_kind for fault in faults} == expected


@pytest.mark.parametrize(("values", "low", "high"), [
    ({"latency_ms": 0}, 0, 0),
    ({"latency_ms": 250}, 250, 250),
    ({"latency": "uniform", "latency_min_ms": 100, "latency_max_ms": 300}, 100, 300),
    ({"latency": "lognormal", "latency_median_ms": 50, "latency_p99_ms": 50}, 50, 50),
])
def test_latency_stays_in_its_bounds(values: dict[str, Any], low: float, high: float) -> None:
    rng, cfg = random.Random(1), config(**values)
    draws = [sample_latency_ms(rng, config=cfg) for _ in range(2000)]
    assert low <= min(draws) and max(draws) <= high


@pytest.mark.parametrize(("median_ms", "p99_ms"), [(500, 2000), (100, 150), (20, 1000)])
def test_lognormal_latency_has_the_configured_median_and_p99(median_ms: float,
                                                              p99_ms: float) -> None:
    rng = random.Random(5)
    cfg = config(latency="lognormal", latency_median_ms=median_ms, latency_p99_ms=p99_ms)
    draws = sorted(sample_latency_ms(rng, config=cfg) for _ in range(40_000))
    assert statistics.median(draws) == pytest.approx(median_ms, rel=0.05)
    assert draws[int(0.99 * len(draws))] == pytest.approx(p99_ms, rel=0.1)


@pytest.mark.parametrize(("median_ms", "p99_ms", "sigma"), [
    (100, 100, 0.0), (100, 1000, 0.98978), (1, 10.24, 1.0),
])
def test_lognormal_sigma(median_ms: float, p99_ms: float, sigma: float) -> None:
    assert lognormal_sigma(median_ms=median_ms, p99_ms=p99_ms) == pytest.approx(sigma, abs=2e-3)


@pytest.mark.parametrize(("delay_s", "header"), [
    (0, "0"), (0.2, "1"), (1, "1"), (1.0000000001, "1"), (1.5, "2"), (59.2, "60"),
])
def test_retry_after_header_rounds_up_to_whole_seconds(delay_s: float, header: str) -> None:
    assert retry_after_header(delay_s) == header


@pytest.mark.parametrize(("limit", "times", "expected"), [
    (2, [0, 1, 2], [None, None, 58.0]),
    (2, [0, 1, 60, 61], [None, None, None, None]),
    (1, [0, 30, 59.5, 60.0], [None, 30.0, 0.5, None]),
    (3, [10, 10, 10, 10, 69.9, 70], [None, None, None, 60.0, 0.1, None]),
])
def test_sliding_window_admits_limit_per_minute(limit: int, times: list[float],
                                                expected: list[float | None]) -> None:
    window = SlidingWindow(limit)
    waits = [window.admit(now) for now in times]
    assert [None if w is None else round(w, 6) for w in waits] == expected


def script(*rules: dict[str, Any]) -> Script:
    return Script.parse({"rules": list(rules)})


def statuses(book: Script, prompts: list[str]) -> list[int | None]:
    replies = [book.take(prompt) for prompt in prompts]
    return [None if r is None else r.status for r in replies]


@pytest.mark.parametrize(("rules", "prompts", "expected"), [
    ([{"match": "abc", "replies": [{"status": 200}, {"status": 429}, {"status": 500}]}],
     ["xabcx", "abc", "abc", "abc", "other"], [200, 429, 500, None, None]),
    ([{"match": "abc", "replies": [{"status": 429}, {"status": 500}], "then": "repeat_last"}],
     ["abc", "abc", "abc"], [429, 500, 500]),
    ([{"match": "a", "replies": [{"status": 500}]}, {"match": "ab", "replies": [{"status": 429}]}],
     ["ab", "ab", "ab"], [500, 429, None]),
    ([{"match": "zz", "replies": [{"status": 500}]}], ["abc"], [None]),
])
def test_script_replies_are_consumed_in_order(rules: list[dict[str, Any]], prompts: list[str],
                                              expected: list[int | None]) -> None:
    assert statuses(script(*rules), prompts) == expected


def test_scripted_reply_fields() -> None:
    scripted = script({"match": "", "replies": [
        {"content": "hi", "finish_reason": "length", "delay_ms": 5},
        {"status": 429, "retry_after": 2}]})
    first, second = scripted.take("x"), scripted.take("x")
    assert first is not None and second is not None
    assert (first.status, first.content, first.finish_reason, first.delay_ms) == (
        200, "hi", "length", 5)
    assert (second.status, second.retry_after) == (429, 2)


@pytest.mark.parametrize("data", [
    None, {}, {"rules": "x"}, {"rules": [{"replies": [{}]}]}, {"rules": [{"match": "a"}]},
    {"rules": [{"match": "a", "replies": []}]},
    {"rules": [{"match": "a", "replies": [{"status": 99}]}]},
    {"rules": [{"match": "a", "replies": [{}], "then": "loop"}]},
    {"rules": [{"match": "a", "replies": [{"colour": "red"}]}]},
])
def test_bad_scripts_are_rejected(data: Any) -> None:
    with pytest.raises(InvalidScript):
        Script.parse(data)


def test_defaults_answer_at_once_and_never_fail() -> None:
    cfg = SimConfig()
    assert cfg.latency_ms == 0 and cfg.rpm_limit is None
    assert {fault.outcome for fault in draw_faults(cfg, 100)} == {"ok"}


@pytest.mark.parametrize(("mode", "roles", "expected"), [
    (None, ("system", "user"), None),
    ("truncated", ("system", "user"), Fault.truncated()),
    ("malformed", ("user",), Fault.malformed("missing_brace")),
    ("truncated", ("system", "user", "assistant", "user"), None),  # a re-ask
])
def test_the_first_answer_fault_breaks_first_asks_only(
        mode: str | None, roles: tuple[str, ...], expected: Fault | None) -> None:
    cfg = config(first_answer_fault=mode, malformed_kinds=["missing_brace"])
    assert first_answer_fault(roles, config=cfg) == expected
