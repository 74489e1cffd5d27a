"""The produce pipeline: bad lines are named and skipped, the rest become jobs."""

from __future__ import annotations

import json

from evalfleet.errors import InvalidSample
from evalfleet.message import Job
from evalfleet.metric import load_registry
from producers.pipeline import produce


def lines(*records: object) -> list[tuple[int, bytes]]:
    return [(n, r if isinstance(r, bytes) else json.dumps(r).encode() + b"\n")
            for n, r in enumerate(records, 1)]


def run(raw: list[tuple[int, bytes]], *, metrics: list[str], rate: float = 1.0):  # type: ignore[no-untyped-def]
    registry = load_registry()
    jobs: list[Job] = []
    errors: list[InvalidSample] = []
    stats = produce(raw, metrics=[registry.get(m) for m in metrics], rate=rate,
                    send=jobs.append, on_error=errors.append)
    return stats, jobs, errors


GOOD = {"id": "a", "input": "q", "output": "o"}


def test_bad_lines_are_reported_and_the_rest_go_on() -> None:
    stats, jobs, errors = run(lines(
        GOOD, b"{broken\n", {"input": "no id"}, b"\xff\xfe\n", b"   \n",
        {"id": 5}, {**GOOD, "id": "b"},
    ), metrics=["rag_qa"])
    assert [job.sample.id for job in jobs] == ["a", "b"]
    assert [e.record for e in errors] == ["line 2", "line 3", "line 4", "line 6"]
    assert errors[1].field == "id" and errors[3].field == "id"
    assert (stats.lines, stats.accepted, stats.rejected, stats.jobs) == (6, 2, 4, 2)


def test_one_job_per_metric() -> None:
    sample = {**GOOD, "reference": "r", "context": ["c"]}
    _, jobs, errors = run(lines(sample), metrics=["rag_qa", "context_precision"])
    assert sorted(job.metric for job in jobs) == ["context_precision", "rag_qa"]
    assert not errors


def test_missing_metric_input_rejects_that_metric_only() -> None:
    stats, jobs, errors = run(lines(GOOD), metrics=["rag_qa", "rec_faithfulness"])
    assert [job.metric for job in jobs] == ["rag_qa"]
    assert len(errors) == 1
    assert errors[0].field is not None and errors[0].field.startswith("fields.")
    assert "rec_faithfulness" in str(errors[0])
    assert stats.rejected == 1


def test_sampling_out_is_counted() -> None:
    records = [{**GOOD, "id": f"id-{n}"} for n in range(1000)]
    stats, jobs, _ = run(lines(*records), metrics=["rag_qa"], rate=0.3)
    assert stats.sampled_out + len(jobs) == 1000
    assert 200 < len(jobs) < 400
