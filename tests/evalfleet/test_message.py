"""Job messages: a JSON round trip, and a clear error for anything else."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from evalfleet.errors import InvalidMessage
from evalfleet.message import Job, decode_job, encode_job, new_job, queue_for
from evalfleet.sample import parse_sample


def test_round_trip_through_json() -> None:
    sample = parse_sample({"id": "a", "input": "{x} {{ y }}", "context": ["c"],
                           "timestamp": "2026-11-21T10:00:00Z", "attributes": {"app": "x"}})
    job = Job(metric="rag_qa", sample=sample, enqueued_at=datetime(2026, 11, 21, tzinfo=UTC),
              attempt=3)
    assert decode_job(json.loads(json.dumps(encode_job(job)))) == job


def test_new_job_is_first_attempt() -> None:
    job = new_job("rag_qa", parse_sample({"id": "a"}))
    assert job.attempt == 1 and job.enqueued_at.tzinfo is not None


def test_queue_names() -> None:
    assert queue_for("rag_qa") == "eval.rag_qa"


def good() -> dict[str, Any]:
    return encode_job(new_job("rag_qa", parse_sample({"id": "a"})))


@pytest.mark.parametrize(("data", "words"), [
    ("text", "not an object"),
    ({**good(), "v": 99}, "unsupported job message version 99"),
    ({**good(), "metric": ""}, "no metric"),
    ({**good(), "attempt": 0}, "bad attempt"),
    ({**good(), "sample": {"input": "no id"}}, "bad sample"),
    ({**good(), "enqueued_at": "soon"}, "bad sample"),
])
def test_bad_messages(data: Any, words: str) -> None:
    with pytest.raises(InvalidMessage, match=words) as caught:
        decode_job(data)
    assert caught.value.data == data
