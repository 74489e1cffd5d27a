"""Reading jobs, ages and ETAs out of stored task messages."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from evalfleet.broker.probe.envelope import EnvelopeSummary, summarize_envelope
from evalfleet.core.message import Job, encode_batch, encode_job
from evalfleet.core.sample import parse_sample

T1 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
T2 = datetime(2026, 11, 22, 10, 5, tzinfo=UTC)


def job(enqueued_at: datetime) -> Job:
    return Job(metric="rag_qa", sample=parse_sample({"id": "a"}), enqueued_at=enqueued_at)


def envelope(argument: Any, *, eta: str | None = None, encoding: str = "base64") -> str:
    body = json.dumps([[argument], {}, {}])
    return json.dumps({
        "body": base64.b64encode(body.encode()).decode() if encoding == "base64" else body,
        "headers": {"eta": eta, "task": "evalfleet.evaluate"},
        "properties": {"body_encoding": encoding},
    })


@pytest.mark.parametrize(("raw", "expected"), [
    (envelope(encode_batch([job(T2), job(T1), job(T2)])), EnvelopeSummary(3, T1, None)),
    (envelope(encode_job(job(T1)), eta=T2.isoformat()), EnvelopeSummary(1, T1, T2)),
    (envelope(encode_job(job(T1)), encoding="utf-8").encode(), EnvelopeSummary(1, T1, None)),
    (envelope({"v": 1, "jobs": [{"enqueued_at": "never"}]}), EnvelopeSummary(1, None, None)),
    (envelope({"v": 1, "enqueued_at": "2026-11-22T10:00:00"}), EnvelopeSummary(1, None, None)),
    ("not json", EnvelopeSummary(1, None, None)),
    (json.dumps({"body": "???", "properties": {"body_encoding": "base64"}}),
     EnvelopeSummary(1, None, None)),
])
def test_summaries(raw: Any, expected: EnvelopeSummary) -> None:
    assert summarize_envelope(raw) == expected


def test_a_parsed_envelope_reads_the_same() -> None:
    raw = envelope(encode_batch([job(T1), job(T2)]))
    assert summarize_envelope(json.loads(raw)) == summarize_envelope(raw)
