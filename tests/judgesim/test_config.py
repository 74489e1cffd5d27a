"""The simulator's configuration: validation and partial updates."""

from __future__ import annotations

from typing import Any

import pytest

from evalfleet.judgesim import InvalidSimConfig, SimConfig


def config(**values: Any) -> SimConfig:
    return SimConfig.build(values)


@pytest.mark.parametrize("values", [
    {"malformed_rate": 1.5}, {"rate_limit_rate": -0.1},
    {"malformed_rate": 0.6, "truncated_rate": 0.6},
    {"latency": "uniform", "latency_min_ms": 10, "latency_max_ms": 5},
    {"latency_median_ms": 100, "latency_p99_ms": 50}, {"latency": "gamma"},
    {"rpm_limit": 0}, {"malformed_kinds": ["bad_kind"]}, {"malformed_kinds": []},
    {"no_such_knob": 1}, {"hang_s": "long"},
])
def test_bad_settings_are_rejected(values: dict[str, Any]) -> None:
    with pytest.raises(InvalidSimConfig):
        SimConfig.build(values)


def test_merge_is_a_partial_update() -> None:
    base = config(seed=3, latency_ms=50, malformed_rate=0.2)
    merged = base.merge({"truncated_rate": 0.1, "latency_ms": 0})
    assert (merged.seed, merged.latency_ms, merged.malformed_rate, merged.truncated_rate) == (
        3, 0, 0.2, 0.1)
    assert base.latency_ms == 50
    assert SimConfig.build(merged.as_json()) == merged
    with pytest.raises(InvalidSimConfig, match="malformed_rate"):
        base.merge({"malformed_rate": 2})
