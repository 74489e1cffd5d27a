"""The simulator's Batch API over real HTTP, through the openai client."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import openai
import pytest

from evalfleet.judgesim import RunningSim, simulated_verdict

PROMPT = ("### Task\nYou are an expert judge.\n- **User Question**: Q{n}?\n"
          "- **Reference Answer**: Paris\n- **Generated Answer**: Paris {n}.\n"
          "4. **Semantic Similarity**: closeness. Set \"evaluation_status\" to \"failed\" "
          "on failure.")


def messages(n: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": PROMPT.format(n=n)}]


def line(n: int, *, model: str = "judge-x") -> dict[str, Any]:
    return {"custom_id": f"key-{n}", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": model, "messages": messages(n),
                     "response_format": {"type": "json_object"}}}


def jsonl(records: list[Any]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def client(judge: RunningSim) -> openai.OpenAI:
    return openai.OpenAI(base_url=judge.base_url, api_key="x", max_retries=0, timeout=10)


def submit(judge: RunningSim, data: bytes, **metadata: str) -> Any:
    llm = client(judge)
    uploaded = llm.files.create(file=("in.jsonl", io.BytesIO(data)), purpose="batch")
    return llm.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                              completion_window="24h", metadata=metadata or None)


def settled(judge: RunningSim, batch_id: str, *, deadline_s: float = 10.0) -> Any:
    llm, end = client(judge), time.monotonic() + deadline_s
    while True:
        batch = llm.batches.retrieve(batch_id)
        if batch.status not in ("validating", "in_progress", "finalizing", "cancelling"):
            return batch
        assert time.monotonic() < end, f"batch still {batch.status}"
        time.sleep(0.02)


def lines_of(judge: RunningSim, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    text = client(judge).files.content(file_id).content.decode()
    return [json.loads(raw) for raw in text.splitlines()]


def test_a_batch_completes_with_every_line_answered_in_shuffled_order(
        judge: RunningSim) -> None:
    judge.configure(batch_turnaround_s=0.2)
    created = submit(judge, jsonl([line(n) for n in range(40)]), run="r1")
    assert created.status == "validating" and created.metadata == {"run": "r1"}
    batch = settled(judge, created.id)
    assert batch.status == "completed" and batch.error_file_id is None
    assert (batch.request_counts.total, batch.request_counts.completed,
            batch.request_counts.failed) == (40, 40, 0)
    assert batch.in_progress_at and batch.completed_at and batch.model == "judge-x"
    output = lines_of(judge, batch.output_file_id)
    ids = [record["custom_id"] for record in output]
    assert sorted(ids) == sorted(f"key-{n}" for n in range(40)) and ids != sorted(ids)
    for record in output:
        n = int(record["custom_id"].split("-")[1])
        assert record["error"] is None and record["response"]["status_code"] == 200
        body = record["response"]["body"]
        assert body["object"] == "chat.completion" and body["model"] == "judge-x"
        verdict = json.loads(body["choices"][0]["message"]["content"])
        assert verdict == simulated_verdict(messages(n))
    stats = judge.stats()["batches"]
    assert stats["lines_accepted"] == stats["lines_judged"] == 40
    # upload, create, at least one retrieve, one download
    assert stats["files_uploaded"] == 1 and stats["api_requests"] >= 4
    assert stats["repeated_custom_ids"] == 0


def test_lines_with_a_shared_prefix_report_cached_tokens(judge: RunningSim) -> None:
    judge.configure(batch_turnaround_s=0.05, prompt_cache_min_tokens=256,
                    prompt_cache_block_tokens=64)
    rubric = "Rubric. " * 200  # 400 tokens: six whole blocks of 64
    records = [{**line(n), "body": {**line(n)["body"], "messages": [
        {"role": "system", "content": rubric}, *messages(n)]}} for n in range(5)]
    batch = settled(judge, submit(judge, jsonl(records)).id)
    usage = [r["response"]["body"]["usage"] for r in lines_of(judge, batch.output_file_id)]
    # The first line judged fills the cache (lines are judged in no set order).
    assert sorted(u["prompt_tokens_details"]["cached_tokens"] for u in usage) == [
        0, 384, 384, 384, 384]
    assert judge.stats()["cached_tokens"] == 4 * 384
    judge.configure(prompt_cache=False)
    batch = settled(judge, submit(judge, jsonl([line(9)])).id)
    (record,) = lines_of(judge, batch.output_file_id)
    assert "prompt_tokens_details" not in record["response"]["body"]["usage"]


def test_line_errors_go_to_the_error_file(judge: RunningSim) -> None:
    judge.configure(batch_turnaround_s=0.1, batch_line_error_rate=0.5, seed=3)
    batch = settled(judge, submit(judge, jsonl([line(n) for n in range(60)])).id)
    output, errors = lines_of(judge, batch.output_file_id), lines_of(judge, batch.error_file_id)
    assert batch.status == "completed" and len(output) + len(errors) == 60
    assert 10 < len(errors) < 50 and batch.request_counts.failed == len(errors)
    assert all(e["response"]["status_code"] == 500 for e in errors)
    assert not {r["custom_id"] for r in output} & {e["custom_id"] for e in errors}


def test_an_expired_batch_does_part_and_names_the_rest(judge: RunningSim) -> None:
    judge.configure(batch_turnaround_s=0.1, batch_expire_done_share=0.6)
    batch = settled(judge, submit(judge, jsonl([line(n) for n in range(50)])).id)
    output, errors = lines_of(judge, batch.output_file_id), lines_of(judge, batch.error_file_id)
    assert batch.status == "expired" and batch.expired_at
    assert len(output) == 30 and len(errors) == 20
    assert {e["error"]["code"] for e in errors} == {"batch_expired"}
    assert all(e["response"] is None for e in errors)


def test_the_enqueued_token_limit_fails_a_batch_without_running_it(judge: RunningSim) -> None:
    judge.configure(batch_turnaround_s=0.5, batch_enqueued_token_limit=1500)
    first = submit(judge, jsonl([line(n) for n in range(20)]))
    second = submit(judge, jsonl([line(n) for n in range(20, 40)]))
    failed = settled(judge, second.id)
    assert failed.status == "failed" and failed.failed_at
    assert failed.errors.data[0].code == "token_limit_exceeded"
    assert failed.output_file_id is None and failed.request_counts.total == 0
    assert settled(judge, first.id).status == "completed"
    # Once the first is done, the same file goes through.
    again = client(judge).batches.create(input_file_id=second.input_file_id,
                                         endpoint="/v1/chat/completions",
                                         completion_window="24h")
    assert settled(judge, again.id).status == "completed"
    assert judge.stats()["batches"]["lines_accepted"] == 40


def test_cancel_and_list(judge: RunningSim) -> None:
    judge.configure(batch_turnaround_s=30)
    created = submit(judge, jsonl([line(n) for n in range(10)]), run="c")
    assert client(judge).batches.cancel(created.id).status == "cancelling"
    batch = settled(judge, created.id)
    assert batch.status == "cancelled" and batch.cancelled_at
    errors = lines_of(judge, batch.error_file_id)
    assert len(errors) == 10 and {e["error"]["code"] for e in errors} == {"batch_cancelled"}
    newer = submit(judge, jsonl([line(99)]))
    listed = client(judge).batches.list(limit=1)
    assert [b.id for b in listed.data] == [newer.id] and listed.has_more
    assert [b.id for b in client(judge).batches.list(limit=5, after=newer.id).data] == [
        created.id]


@pytest.mark.parametrize(("records", "code", "line_number"), [
    ([line(1), b"{not json"], "invalid_json_line", 2),
    ([line(1), line(1)], "duplicate_custom_id", 2),
    ([line(1), {**line(2), "url": "/v1/embeddings"}], "mismatched_endpoint", 2),
    ([line(1), line(2, model="other")], "mismatched_model", None),
    ([{**line(1), "custom_id": ""}], "missing_required_parameter", 1),
    ([[1, 2]], "invalid_request", 1),
])
def test_a_bad_input_file_fails_validation_naming_the_line(
        judge: RunningSim, records: list[Any], code: str, line_number: int | None) -> None:
    judge.configure(batch_turnaround_s=0.05)
    data = b"".join(r + b"\n" if isinstance(r, bytes) else jsonl([r]) for r in records)
    batch = settled(judge, submit(judge, data).id)
    assert batch.status == "failed"
    (error,) = batch.errors.data
    assert error.code == code and error.line == line_number
    assert judge.stats()["batches"]["lines_judged"] == 0


def test_requests_the_provider_refuses(judge: RunningSim) -> None:
    llm = client(judge)
    with pytest.raises(openai.BadRequestError, match="purpose"):
        llm.files.create(file=("a.jsonl", io.BytesIO(b"{}")), purpose="fine-tune")
    with pytest.raises(openai.NotFoundError):
        llm.batches.retrieve("batch-nope")
    with pytest.raises(openai.NotFoundError):
        llm.batches.create(input_file_id="file-nope", endpoint="/v1/chat/completions",
                           completion_window="24h")
    uploaded = llm.files.create(file=("a.jsonl", io.BytesIO(jsonl([line(1)]))),
                                purpose="batch")
    assert llm.files.retrieve(uploaded.id).bytes == len(jsonl([line(1)]))
    with pytest.raises(openai.BadRequestError, match="completion_window"):
        llm.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                           completion_window="1h")  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError, match="metadata"):
        llm.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                           completion_window="24h", metadata={"k": "v" * 600})
