"""Screening one record: format, limits, sampling, metric inputs, redaction."""

from __future__ import annotations

import pytest

from evalfleet.core.metric import load_registry
from producers.limits import FieldLimits
from producers.quota import SegmentQuota
from producers.screen import Admitted, Rejected, SampledOut, Screen
from tests.producers.builders import line, policy, record

REGISTRY = load_registry()


@pytest.fixture
def screen() -> Screen:
    return Screen(metrics={m.name: m for m in REGISTRY}, limits=FieldLimits(max_chars=200),
                  quota=SegmentQuota(max_tracked=10))


def test_admitted_for_the_metrics_that_keep_it(screen: Screen) -> None:
    item = screen.admit(line(record(1)), record="line 1", policy=policy(),
                        metrics=["rag_qa", "context_precision"], now_s=0.0)
    assert isinstance(item, Admitted)
    assert [p.metric for p in item.picks] == ["rag_qa", "context_precision"]
    assert item.segment == "app=hr-assistant,route=/chat" and item.redactions is None


@pytest.mark.parametrize(("raw", "field"), [
    (b'{"id": "x", "input": \n', None),
    (line({"input": "no id"}), "id"),
    (line(record(1, input="x" * 201)), "input"),
    ({"id": "a", "context": "not a list"}, "context"),
])
def test_rejected_with_the_field(screen: Screen, raw: object, field: str | None) -> None:
    item = screen.admit(raw, record="line 3", policy=policy(), metrics=["rag_qa"], now_s=0.0)
    assert isinstance(item, Rejected) and not item.valid
    assert item.errors[0].record == "line 3" and item.errors[0].field == field


def test_missing_metric_inputs_reject_that_metric_only(screen: Screen) -> None:
    item = screen.admit(record(1), record="samples[0]", policy=policy(),
                        metrics=["rag_qa", "rec_faithfulness"], now_s=0.0)
    assert isinstance(item, Admitted)
    assert [p.metric for p in item.picks] == ["rag_qa"]
    assert item.errors[0].field.startswith("fields.")  # type: ignore[union-attr]
    assert "(rec_faithfulness)" in str(item.errors[0])
    only = screen.admit(record(1), record="samples[0]", policy=policy(),
                        metrics=["rec_faithfulness"], now_s=0.0)
    assert isinstance(only, Rejected) and only.valid


def test_sampled_out(screen: Screen) -> None:
    item = screen.admit(record(1), record="r", policy=policy(rate=0.0), metrics=["rag_qa"],
                        now_s=0.0)
    assert item == SampledOut(record="r", sample_id="req-00001",
                              segment="app=hr-assistant,route=/chat")


def test_redact_uses_the_policy_rules(screen: Screen) -> None:
    item = screen.admit(record(1, input="mail a@b.io"), record="r", policy=policy(),
                        metrics=["rag_qa"], now_s=0.0)
    assert isinstance(item, Admitted)
    redacted = screen.redact(item, policy=policy())
    assert redacted.sample.input == "mail [EMAIL]" and redacted.redactions == {"email": 1}
    off = screen.redact(item, policy=policy("redaction: {kinds: []}"))
    assert off.sample.input == "mail a@b.io" and off.redactions == {}
