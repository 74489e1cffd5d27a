"""The produce pipeline: bad lines are named and skipped, the rest become jobs."""

from __future__ import annotations

import json

import redis

from evalfleet.core.errors import InvalidSample
from evalfleet.core.message import Job
from evalfleet.core.metric import load_registry
from evalfleet.core.settings import Settings
from producers.pipeline import Pipeline, produce, run_lines
from producers.runtime import ProducerRuntime
from tests.producers.builders import queued_ids, record


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


# The batch pipeline over a real runtime (Redis broker, shared deduplication).

def make_pipeline(settings: Settings, *, config: str = "",
                  metrics: tuple[str, ...] | None = ("rag_qa",),
                  rate: float | None = None) -> tuple[ProducerRuntime, Pipeline]:
    path = None
    if config:
        path = settings.store.data_dir.parent / "sampling.yaml"
        path.write_text(config)
    runtime = ProducerRuntime(settings, sampling_config=path)
    return runtime, runtime.pipeline(metrics=list(metrics) if metrics else None, rate=rate,
                                     source="test")


def test_each_record_gets_one_outcome(psettings: Settings, redis_client: redis.Redis) -> None:
    runtime, pipeline = make_pipeline(psettings, config="metrics: {rag_qa: {rate: 1.0}}")
    records = [
        ("samples[0]", record(0)), ("samples[1]", {"id": "bad", "context": [1]}),
        ("samples[2]", record(0)), ("samples[3]", record(3, output="")),
        ("samples[4]", record(4, input="mail a@b.io")),
    ]
    results = pipeline.process(records)
    runtime.close()
    assert [r.status for r in results] == ["accepted", "rejected", "duplicate", "rejected",
                                           "accepted"]
    assert results[1].errors[0].field == "context[0]" and results[1].sample_id == "bad"
    assert results[3].errors[0].field == "output" and results[3].valid
    assert results[4].redactions == {"email": 1}
    assert queued_ids(redis_client, "rag_qa") == ["req-00000", "req-00004"]


def test_metrics_default_to_the_config(psettings: Settings, redis_client: redis.Redis) -> None:
    runtime, pipeline = make_pipeline(
        psettings, metrics=None,
        config="metrics: {rag_qa: {rate: 1.0}, context_precision: {rate: 0.0}}")
    (result,) = pipeline.process([("r", record(1))])
    runtime.close()
    assert [(f.metric, f.status) for f in result.jobs] == [("rag_qa", "enqueued")]
    assert len(queued_ids(redis_client, "context_precision")) == 0


def test_run_lines_batches_and_counts(psettings: Settings, redis_client: redis.Redis) -> None:
    runtime, pipeline = make_pipeline(psettings, rate=0.5)
    raw = [(n + 1, json.dumps(record(n)).encode() + b"\n") for n in range(100)]
    raw.insert(10, (0, b"\n"))
    errors: list[InvalidSample] = []
    stats = run_lines(raw, pipeline=pipeline, batch_size=7, on_error=errors.append)
    runtime.close()
    assert stats.lines == 100 and stats.accepted == 100 and not errors
    assert stats.jobs + stats.sampled_out == 100
    assert len(queued_ids(redis_client, "rag_qa")) == stats.jobs
