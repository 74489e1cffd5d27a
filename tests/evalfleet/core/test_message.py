"""Job messages: a JSON round trip, and a clear error for anything else."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from evalfleet.core.errors import InvalidMessage
from evalfleet.core.message import (
    Job,
    decode_batch,
    decode_job,
    encode_batch,
    encode_job,
    new_job,
    queue_for,
)
from evalfleet.core.sample import parse_sample


def test_round_trip_through_json() -> None:
    sample = parse_sample({"id": "a", "input": "{x} {{ y }}", "context": ["c"],
                           "timestamp": "2026-11-21T10:00:00Z", "attributes": {"app": "x"}})
    job = Job(metric="rag_qa", sample=sample, enqueued_at=datetime(2026, 11, 21, tzinfo=UTC),
              attempt=3)
    assert decode_job(json.loads(json.dumps(encode_job(job)))) == job


def test_purpose_and_judge_model_survive_a_batch_and_default_to_production() -> None:
    sample = parse_sample({"id": "a"})
    jobs = [new_job("rag_qa", sample, purpose="calibration", judge_model="judge-2"),
            new_job("rag_qa", sample)]
    message = json.loads(json.dumps(encode_batch(jobs)))
    assert decode_batch(message) == jobs
    assert "purpose" not in message["jobs"][1] and "judge_model" not in message["jobs"][1]
    assert (jobs[1].purpose, jobs[1].judge_model) == ("production", None)


def test_gold_labels_survive_a_batch() -> None:
    sample = parse_sample({"id": "canary:1:gold-1"})
    job = new_job("bbh_match", sample, purpose="canary", labels={"correct": 1.0, "reasoning": 4})
    message = json.loads(json.dumps(encode_batch([job])))
    assert decode_batch(message)[0].labels == {"correct": 1.0, "reasoning": 4.0}
    assert "labels" not in encode_job(new_job("rag_qa", sample))


def test_a_mark_only_job_survives_a_batch_and_is_left_out_otherwise() -> None:
    sample = parse_sample({"id": "conv-1#2-aaaaaaaaaaaa"})
    jobs = [new_job("conversation_goal_completion", sample, finalise_only=True),
            new_job("conversation_goal_completion", sample)]
    message = json.loads(json.dumps(encode_batch(jobs)))
    assert [job.finalise_only for job in decode_batch(message)] == [True, False]
    assert "finalise_only" not in message["jobs"][1]


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
    ({**good(), "purpose": "testing"}, "unknown purpose 'testing'"),
    ({**good(), "judge_model": ""}, "bad judge model"),
    ({**good(), "judge_model": 4}, "bad judge model 4"),
    ({**good(), "labels": ["correct"]}, "bad labels"),
    ({**good(), "labels": {"correct": True}}, "bad labels"),
    ({**good(), "labels": {"faithfulness": "high"}}, "bad labels"),
    ({**good(), "labels": {"faithfulness": float("nan")}}, "bad labels"),
    ({**good(), "finalise_only": "yes"}, "bad finalise_only 'yes'"),
])
def test_bad_messages(data: Any, words: str) -> None:
    with pytest.raises(InvalidMessage, match=words) as caught:
        decode_job(data)
    assert caught.value.data == data


def test_batch_round_trip_through_json() -> None:
    jobs = [new_job("rag_qa", parse_sample({"id": f"s-{n}", "input": "q"})) for n in range(3)]
    message = json.loads(json.dumps(encode_batch(jobs)))
    assert message["metric"] == "rag_qa" and len(message["jobs"]) == 3
    assert decode_batch(message) == jobs


def test_a_single_job_message_decodes_as_a_batch_of_one() -> None:
    job = new_job("rag_qa", parse_sample({"id": "a"}))
    assert decode_batch(encode_job(job)) == [job]


def test_batches_hold_one_metric() -> None:
    jobs = [new_job(m, parse_sample({"id": "a"})) for m in ("rag_qa", "bbh_match")]
    with pytest.raises(ValueError, match="exactly one metric"):
        encode_batch(jobs)
    with pytest.raises(ValueError, match="exactly one metric"):
        encode_batch([])


@pytest.mark.parametrize(("data", "words"), [
    ({"v": 1, "metric": "rag_qa", "jobs": []}, "no jobs"),
    ({"v": 1, "metric": "rag_qa", "jobs": "x"}, "no jobs"),
    ({"v": 1, "metric": "rag_qa", "jobs": [{"sample": {"id": "a"}}]}, "bad sample"),
    ({"v": 1, "metric": "rag_qa", "jobs": [5]}, "not an object"),
])
def test_bad_batches(data: Any, words: str) -> None:
    with pytest.raises(InvalidMessage, match=words):
        decode_batch(data)
