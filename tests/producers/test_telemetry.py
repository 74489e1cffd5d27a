"""Telemetry: segment labels are capped so Prometheus stays small."""

from __future__ import annotations

import pytest

from producers import telemetry


def test_segment_labels_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(telemetry, "_segments", set())
    monkeypatch.setattr(telemetry, "MAX_SEGMENT_LABELS", 2)
    assert [telemetry.segment_label(s) for s in ("a", "b", "c", "a")] == ["a", "b", "other", "a"]


def test_metric_names_carry_the_prefix() -> None:
    from prometheus_client import REGISTRY, generate_latest

    telemetry.SHED.labels("m", "seg", "drop_new")
    text = generate_latest(REGISTRY).decode()
    for name in ("evalfleet_producer_records_total", "evalfleet_producer_shed_total",
                 "evalfleet_producer_dropped_total", "evalfleet_producer_jobs_total",
                 "evalfleet_producer_redactions_total"):
        assert f"# TYPE {name} counter" in text


def test_long_segment_labels_are_bounded_and_stay_apart() -> None:
    from producers.telemetry import MAX_SEGMENT_LABEL_CHARS, short_label

    one, two = "app=" + "x" * 70_000, "app=" + "x" * 69_999 + "y"
    assert short_label("app=bot") == "app=bot"
    assert len(short_label(one)) == MAX_SEGMENT_LABEL_CHARS
    assert short_label(one) != short_label(two)
