"""Request bodies into named records; results into the report."""

from __future__ import annotations

import json

import pytest

from evalfleet.core.errors import InvalidSample
from producers.dispatcher import JobFate
from producers.ingest.body import Problem, build_report, parse_body
from producers.pipeline import RecordResult


@pytest.mark.parametrize(("body", "names"), [
    ({"id": "a"}, ["sample"]),
    ([{"id": "a"}, {"id": "b"}], ["samples[0]", "samples[1]"]),
    ({"samples": [{"id": "a"}, 5]}, ["samples[0]", "samples[1]"]),
])
def test_shapes(body: object, names: list[str]) -> None:
    records = parse_body(json.dumps(body).encode(), max_batch=10)
    assert not isinstance(records, Problem)
    assert [name for name, _ in records] == names


@pytest.mark.parametrize(("raw", "status", "detail"), [
    (b"{nope", 400, "not valid JSON"),
    (b'{"id": NaN}', 400, "not valid JSON"),
    (b'"text"', 422, "expected a sample object"),
    (b'{"samples": []}', 422, "empty"),
    (b"[]", 422, "empty"),
    (b'{"samples": {}}', 422, "nothing beside it"),
    (b'{"samples": [], "x": 1}', 422, "nothing beside it"),
    (json.dumps([{"id": str(n)} for n in range(11)]).encode(), 413,
     "11 samples in one request, over the limit of 10"),
])
def test_problems(raw: bytes, status: int, detail: str) -> None:
    problem = parse_body(raw, max_batch=10)
    assert isinstance(problem, Problem)
    assert problem.status == status and detail in problem.detail


def test_report_counts_partition_the_records() -> None:
    error = InvalidSample("is required", record="samples[1]", sample_id="b", field="output")
    results = [
        RecordResult(0, "samples[0]", "a", "accepted",
                     jobs=(JobFate("rag_qa", "enqueued"), JobFate("bbh_match", "shed"))),
        RecordResult(1, "samples[1]", "b", "rejected", errors=(error,), valid=True),
        RecordResult(2, "samples[2]", "c", "sampled_out"),
        RecordResult(3, "samples[3]", "d", "duplicate", jobs=(JobFate("rag_qa", "duplicate"),)),
        RecordResult(4, "samples[4]", "e", "shed", jobs=(JobFate("rag_qa", "shed"),)),
    ]
    report = build_report(results)
    assert report == {
        "received": 5, "accepted": 1, "sampled_out": 1, "shed": 1, "duplicates": 1,
        "rejected": 1, "jobs": {"rag_qa": 1},
        "rejections": [{"index": 1, "record": "samples[1]", "id": "b", "field": "output",
                        "error": "is required",
                        "message": "samples[1], id 'b', field 'output': is required"}],
    }


def test_a_batch_holding_a_record_nested_too_deep_is_split_undecoded() -> None:
    from producers.ingest.body import parse_body

    deep = b'{"id": "d", "fields": {"x": ' + b"[" * 5_000 + b"]" * 5_000 + b"}}"
    records = parse_body(b'{"samples": [{"id": "a"}, ' + deep + b"]}", max_batch=10)
    assert isinstance(records, list)
    assert [name for name, _ in records] == ["samples[0]", "samples[1]"]
    assert records[1][1].strip() == deep
