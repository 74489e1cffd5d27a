"""Spans to jobs, with the jobs in real Redis: the endpoint, assembly across requests and
replicas, the quiet period, the longest wait, late spans, a dead sweeper's lease, the
limits; each on the Redis buffer and the in-memory one. Time is a clock the test moves,
never a sleep."""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from prometheus_client import REGISTRY
from starlette.testclient import TestClient

from producers.ingest import create_app
from producers.runtime import ProducerRuntime
from producers.sampler import is_sampled
from producers.traces.assembly import TraceAssembly
from producers.traces.buffer import (
    CLAIM_LEASE_S,
    MemoryTraceBuffer,
    RedisTraceBuffer,
    TraceBuffer,
)
from tests.producers.builders import producer_settings, queued, queued_ids
from tests.producers.traces.builders import TRACE_ID, json_request, json_span, sdk_request

TOKEN = "tok-otlp"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = {**AUTH, "Content-Type": "application/json"}
ROOT, RETRIEVER, LLM = "a000000000000001", "a000000000000002", "a000000000000003"


class Clock:
    def __init__(self) -> None:
        self.now_s = 1_000_000.0

    def __call__(self) -> float:
        return self.now_s


class Replica:
    """One ingest replica: its app, its assembly on the shared Redis, the test's clock."""

    def __init__(self, runtime: ProducerRuntime, clock: Clock, buffer: TraceBuffer) -> None:
        self.buffer = buffer
        self.assembly = TraceAssembly(buffer=self.buffer, metrics={
            m.name: m for m in runtime.registry}, clock=clock,
            pipeline=runtime.pipeline(metrics=None, rate=None, source="otlp"))
        self.client = TestClient(create_app(runtime, tokens=[TOKEN], metrics=None,
                                            traces=self.assembly))

    def post(self, body: bytes, headers: dict[str, str] | None = None) -> Any:
        return self.client.post("/v1/traces", content=body,
                                headers=JSON if headers is None else headers)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=["redis", "memory"])
def make_replica(request: pytest.FixtureRequest, redis_url: str, tmp_path: Path,
                 clock: Clock) -> Iterator[Callable[..., Replica]]:
    """Replicas on one buffer: Redis (each replica its own client), or one in-memory
    buffer the replicas of the test share."""
    runtimes: list[ProducerRuntime] = []
    shared: list[MemoryTraceBuffer] = []

    def make(config: str = "metrics: {rag_qa: {rate: 1.0}}", **settings: Any) -> Replica:
        path = tmp_path / "sampling.yaml"
        path.write_text(config)
        runtime = ProducerRuntime(producer_settings(redis_url, tmp_path, otlp_quiet_s=3,
                                                    **settings), sampling_config=path)
        runtimes.append(runtime)
        if request.param == "redis":
            buffer = runtime.trace_buffer()
            assert isinstance(buffer, RedisTraceBuffer)
        else:
            buffer = shared[0] if shared else runtime.trace_buffer(shared=False)
            assert isinstance(buffer, MemoryTraceBuffer)
            shared.append(buffer)
        return Replica(runtime, clock, buffer)

    yield make
    for runtime in runtimes:
        runtime.close()


def rag_spans(trace_id: str = TRACE_ID) -> dict[str, dict[str, Any]]:
    return {
        "root": json_span(ROOT, trace_id=trace_id, name="POST /chat", start_ns=1, end_ns=9,
                          attributes={"http.route": "/chat"}, kind=2),
        "retriever": json_span(RETRIEVER, trace_id=trace_id, parent=ROOT, name="retrieve",
                               attributes={"openinference.span.kind": "RETRIEVER",
                                           "retrieval.documents.0.document.content":
                                               "Pauses last 3 months."}),
        "llm": json_span(LLM, trace_id=trace_id, parent=ROOT, name="chat", attributes={
            "openinference.span.kind": "LLM", "llm.model_name": "gpt-x",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": "Can I pause?",
            "llm.output_messages.0.message.content": "Yes, for 3 months."}),
    }


def test_a_trace_split_over_requests_and_replicas_is_produced_once_when_quiet(
    make_replica: Callable[..., Replica], clock: Clock, redis_client: redis.Redis,
) -> None:
    one, two = make_replica(), make_replica()
    spans = rag_spans()
    answer = one.post(json_request(spans["retriever"]))
    assert answer.status_code == 200 and answer.json() == {}
    clock.now_s += 2
    assert two.post(json_request(spans["llm"], spans["root"])).status_code == 200
    clock.now_s += 2.9  # the root has ended, but the trace has not been quiet for 3 s
    assert one.assembly.sweep().traces == 0
    clock.now_s += 0.2
    assert two.assembly.sweep().traces == 1 and one.assembly.sweep().traces == 0
    (job, _), = queued(redis_client, "rag_qa")
    sample = job["sample"]
    assert sample["id"] == TRACE_ID and sample["input"] == "Can I pause?"
    assert sample["output"] == "Yes, for 3 months."
    assert sample["context"] == ["Pauses last 3 months."]
    assert sample["attributes"] == {"app": "support-bot", "route": "/chat", "model": "gpt-x"}
    assert sample["fields"] == {"trace_id": TRACE_ID}
    # A span of the produced trace is counted as late, never a second job.
    late = json_span("a000000000000009", parent=ROOT, name="late")
    assert one.post(json_request(late)).status_code == 200
    clock.now_s += 100
    assert one.assembly.sweep().traces == 0
    assert queued_ids(redis_client, "rag_qa") == [TRACE_ID]


def test_without_its_root_a_trace_waits_for_the_longest_wait(
    make_replica: Callable[..., Replica], clock: Clock, redis_client: redis.Redis,
) -> None:
    replica = make_replica(otlp_max_wait_s=20)
    spans = rag_spans()
    replica.post(json_request(spans["retriever"], spans["llm"]))
    clock.now_s += 19
    assert replica.assembly.sweep().traces == 0
    clock.now_s += 1
    assert replica.assembly.sweep().traces == 1
    assert queued_ids(redis_client, "rag_qa") == [TRACE_ID]


def test_a_sweeper_that_dies_after_claiming_leaves_the_trace_to_the_next(
    make_replica: Callable[..., Replica], clock: Clock, redis_client: redis.Redis,
) -> None:
    replica = make_replica()
    replica.post(json_request(*rag_spans().values()))
    clock.now_s += 3
    (claimed,) = replica.buffer.claim_due(now_s=clock.now_s, limit=10)  # then "dies"
    assert claimed.trace_id == TRACE_ID and len(claimed.spans) == 3
    assert replica.assembly.sweep().traces == 0  # leased
    clock.now_s += CLAIM_LEASE_S
    assert replica.assembly.sweep().traces == 1
    assert queued_ids(redis_client, "rag_qa") == [TRACE_ID]


def test_the_sampling_decision_is_taken_on_the_trace_id_before_buffering(
    make_replica: Callable[..., Replica], clock: Clock, redis_client: redis.Redis,
) -> None:
    replica = make_replica("metrics: {rag_qa: {rate: 0.5}}")
    trace_ids = [f"{n:032x}" for n in range(1, 41)]
    for trace_id in trace_ids:
        replica.post(json_request(*rag_spans(trace_id).values()))
    kept = {t for t in trace_ids if is_sampled(t, 0.5, metric="rag_qa")}
    assert 0 < len(kept) < len(trace_ids)
    assert replica.buffer.open_traces() == len(kept)  # the others cost nothing
    clock.now_s += 3
    assert replica.assembly.sweep().traces == len(kept)
    assert set(queued_ids(redis_client, "rag_qa")) == kept


def test_a_metric_is_not_produced_for_a_trace_lacking_its_inputs(
    make_replica: Callable[..., Replica], clock: Clock, redis_client: redis.Redis,
) -> None:
    replica = make_replica("metrics: {rag_qa: {rate: 1.0}, bbh_match: {rate: 1.0}}\n"
                           "traces: {reference: app.expected}")
    with_reference = rag_spans()
    with_reference["root"]["attributes"].append(
        {"key": "app.expected", "value": {"stringValue": "Yes."}})
    replica.post(json_request(with_reference["root"], with_reference["llm"]))
    replica.post(json_request(*rag_spans(f"{7:032x}").values()))
    clock.now_s += 3
    assert replica.assembly.sweep().traces == 2
    # No retrieval: no rag_qa (it reads the context); no reference: no bbh_match.
    assert queued_ids(redis_client, "rag_qa") == [f"{7:032x}"]
    assert queued_ids(redis_client, "bbh_match") == [TRACE_ID]


def test_a_selector_judges_each_span_with_the_trace_sampling_decision(
    make_replica: Callable[..., Replica], clock: Clock, redis_client: redis.Redis,
) -> None:
    replica = make_replica("metrics: {rag_qa: {rate: 0.5}}\ntraces: {judge: {kind: [LLM]}}")
    trace_ids = [f"{n:032x}" for n in range(1, 21)]
    for trace_id in trace_ids:
        replica.post(json_request(*rag_spans(trace_id).values()))
    clock.now_s += 3
    replica.assembly.sweep()
    assert sorted(queued_ids(redis_client, "rag_qa")) == sorted(
        f"{t}:{LLM}" for t in trace_ids if is_sampled(t, 0.5, metric="rag_qa"))


def test_partial_success_names_the_bad_spans_and_keeps_the_good(
    make_replica: Callable[..., Replica], clock: Clock, redis_client: redis.Redis,
) -> None:
    replica = make_replica()
    spans = rag_spans()
    bad = [json_span("zz00000000000000", parent=ROOT),
           json_span("a000000000000005", parent=ROOT,
                     attributes={"gen_ai.input.messages": "[" * 100 + "]" * 100})]
    answer = replica.post(json_request(*spans.values(), *bad))
    assert answer.status_code == 200
    partial = answer.json()["partialSuccess"]
    assert partial["rejectedSpans"] == 2
    assert f"trace {TRACE_ID}, span ?, field spanId" in partial["errorMessage"]
    assert ('span a000000000000005, field attributes["gen_ai.input.messages"]: JSON text '
            "nested deeper than 32 levels") in partial["errorMessage"]
    clock.now_s += 3
    replica.assembly.sweep()
    assert queued_ids(redis_client, "rag_qa") == [TRACE_ID]


def test_protobuf_gzip_and_deflate_bodies(
    make_replica: Callable[..., Replica], clock: Clock, redis_client: redis.Redis,
) -> None:
    replica = make_replica()

    def build(tracer: Any) -> None:
        with tracer.start_as_current_span("POST /chat"):
            with tracer.start_as_current_span("retrieve") as retriever:
                retriever.set_attribute("openinference.span.kind", "RETRIEVER")
                retriever.set_attribute("retrieval.documents.0.document.content", "Doc.")
            with tracer.start_as_current_span("chat") as llm:
                llm.set_attribute("openinference.span.kind", "LLM")
                llm.set_attribute("llm.input_messages.0.message.role", "user")
                llm.set_attribute("llm.input_messages.0.message.content", "Q?")
                llm.set_attribute("llm.output_messages.0.message.content", "A.")

    protobuf = {**AUTH, "Content-Type": "application/x-protobuf"}
    for encoding, body in [("gzip", gzip.compress(sdk_request(build))),
                           ("deflate", zlib.compress(sdk_request(build)))]:
        answer = replica.post(body, {**protobuf, "Content-Encoding": encoding})
        assert answer.status_code == 200, answer.content
        assert answer.headers["content-type"] == "application/x-protobuf"
        assert ExportTraceServiceResponse.FromString(answer.content) == \
            ExportTraceServiceResponse()
    clock.now_s += 3
    assert replica.assembly.sweep().traces == 2
    assert len(queued_ids(redis_client, "rag_qa")) == 2


@pytest.mark.parametrize(("headers", "body", "status", "detail"), [
    ({}, b"{}", 401, "missing bearer token"),
    ({"Authorization": "Bearer nope"}, b"{}", 403, "not accepted"),
    ({**AUTH, "Content-Type": "text/plain"}, b"{}", 415, "application/x-protobuf"),
    ({**JSON, "Content-Encoding": "br"}, b"{}", 415, "'br' is not supported"),
    ({**JSON, "Content-Encoding": "gzip"}, b"not gzip", 400, "not valid gzip"),
    # mtime=0: the same bytes, so the same test id, in every process (pytest-xdist).
    ({**JSON, "Content-Encoding": "gzip"}, gzip.compress(b" " * 5000, mtime=0), 413,
     "decompresses"),
    (JSON, b"x" * 5000, 413, "over the limit of 4,096 bytes"),
    (JSON, b"{nope", 400, "not valid JSON"),
    (JSON, b'{"resourceSpans":' + b"[" * 1000 + b"]" * 1000 + b"}", 400,
     "field resourceSpans: JSON nested deeper than 64 levels"),
    (JSON, json_request(*(json_span(f"{n + 1:016x}") for n in range(4))), 413,
     "4 spans in one request, over the limit of 3"),
    ({**AUTH, "Content-Type": "application/x-protobuf"}, b"\xff\x01", 400,
     "not an OTLP ExportTraceServiceRequest"),
])
def test_bad_requests_get_a_status_naming_the_problem(
    make_replica: Callable[..., Replica], headers: dict[str, str], body: bytes, status: int,
    detail: str,
) -> None:
    replica = make_replica(ingest_max_request_bytes=4096, otlp_max_spans_per_request=3)
    answer = replica.post(body, headers)
    assert answer.status_code == status, answer.content
    if "protobuf" in headers.get("Content-Type", "application/x-protobuf"):
        message = status_pb2.Status.FromString(answer.content).message
    else:
        message = json.loads(answer.content)["message"]
    assert detail in message, message


def test_too_many_open_traces_is_503_with_retry_after_and_nothing_kept(
    make_replica: Callable[..., Replica], redis_client: redis.Redis,
) -> None:
    replica = make_replica(otlp_max_open_traces=2, otlp_max_spans_per_trace=2)
    for n in (1, 2):
        assert replica.post(json_request(rag_spans(f"{n:032x}")["llm"])).status_code == 200
    answer = replica.post(json_request(*rag_spans(f"{3:032x}").values()))
    assert answer.status_code == 503 and answer.headers["Retry-After"] == "5"
    assert "EVALFLEET_OTLP_MAX_OPEN_TRACES" in answer.json()["message"]
    assert replica.buffer.open_traces() == 2
    # A known trace still takes spans, up to its own limit; the rest are named.
    over = replica.post(json_request(*rag_spans(f"{1:032x}").values())).json()
    assert over["partialSuccess"]["rejectedSpans"] == 2
    assert "over its limit of 2 spans" in over["partialSuccess"]["errorMessage"]


def test_a_trace_keeps_at_most_its_bytes(make_replica: Callable[..., Replica]) -> None:
    replica = make_replica(otlp_max_trace_bytes=4096)
    big = {"gen_ai.input.messages": "x" * 1500}
    spans = [json_span(f"b00000000000000{n}", parent=ROOT, attributes=big) for n in range(4)]
    first = replica.post(json_request(*spans[:2])).json()
    assert first == {}
    over = replica.post(json_request(*spans[2:])).json()["partialSuccess"]
    assert over["rejectedSpans"] == 2  # about 1.6 kB each: a third does not fit
    assert "span b000000000000002, field traceId" in over["errorMessage"]
    assert "4,096 bytes" in over["errorMessage"]


def test_a_trace_whose_sample_is_refused_is_counted_and_finished(
    make_replica: Callable[..., Replica], clock: Clock, redis_client: redis.Redis,
) -> None:
    replica = make_replica(max_field_chars=1000)
    spans = rag_spans()
    spans["llm"]["attributes"][3]["value"]["stringValue"] = "q" * 2000  # the question
    spans["root"]["endTimeUnixNano"] = str(2**64 - 1)  # a time no datetime holds
    before = REGISTRY.get_sample_value("evalfleet_producer_otlp_metric_skipped_total",
                                       {"metric": "all", "input": "input"}) or 0
    replica.post(json_request(*spans.values()))
    clock.now_s += 3
    sweep = replica.assembly.sweep()
    assert sweep.traces == 1 and sweep.results[0].status == "rejected"
    assert "2,000 characters, over the limit of 1,000" in str(sweep.results[0].errors[0])
    assert REGISTRY.get_sample_value("evalfleet_producer_otlp_metric_skipped_total",
                                     {"metric": "all", "input": "input"}) == before + 1
    assert replica.buffer.open_traces() == 0 and queued_ids(redis_client, "rag_qa") == []


def agent_spans(trace_id: str = TRACE_ID) -> dict[str, dict[str, Any]]:
    """An agent run as pydantic-ai sends it: the tool and chat spans first, the agent
    (root) span last, when the run ends."""
    messages = [{"role": "user", "parts": [{"type": "text", "content": "Weather in Oslo?"}]}]
    return {
        "root": json_span(ROOT, trace_id=trace_id, name="invoke_agent agent", start_ns=1,
                          end_ns=9, attributes={"gen_ai.operation.name": "invoke_agent",
                                                "gen_ai.agent.name": "agent"}),
        "tool": json_span(RETRIEVER, trace_id=trace_id, parent=ROOT, name="execute_tool w",
                          attributes={"gen_ai.operation.name": "execute_tool",
                                      "gen_ai.tool.name": "weather",
                                      "gen_ai.tool.call.arguments": '{"city": "Oslo"}',
                                      "gen_ai.tool.call.result": "4 C, rain"}),
        "llm": json_span(LLM, trace_id=trace_id, parent=ROOT, name="chat m", attributes={
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "m-1",
            "gen_ai.input.messages": json.dumps(messages),
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                {"type": "text", "content": "4 C and rain."}]}])}),
    }


TRACE_METRIC = "metrics: {agent_task_completion: {rate: 1.0}, rag_qa: {rate: 1.0}}"


def test_an_agent_run_longer_than_the_longest_wait_is_produced_whole_at_its_end(
    make_replica: Callable[..., Replica], clock: Clock, redis_client: redis.Redis,
) -> None:
    replica = make_replica(TRACE_METRIC, otlp_max_wait_s=60, otlp_agent_max_wait_s=600)
    spans = agent_spans()
    replica.post(json_request(spans["tool"]))
    clock.now_s += 90  # past the 60 s of a plain trace: an agent's waits for its root
    assert replica.assembly.sweep().traces == 0
    replica.post(json_request(spans["llm"], spans["root"]))
    clock.now_s += 3
    assert replica.assembly.sweep().traces == 1
    (job, _), = queued(redis_client, "agent_task_completion")
    trajectory = job["sample"]["trajectory"]
    assert [s["type"] for s in trajectory["steps"]] == ["tool", "model"]
    assert trajectory["steps"][0]["arguments"] == {"city": "Oslo"}
    # No retrieval: rag_qa is left out; a trace metric needs a trajectory, which it has.
    assert queued_ids(redis_client, "rag_qa") == []


def test_an_agent_run_whose_root_never_ends_is_produced_at_its_own_longest_wait(
    make_replica: Callable[..., Replica], clock: Clock, redis_client: redis.Redis,
) -> None:
    replica = make_replica(TRACE_METRIC, otlp_max_wait_s=60, otlp_agent_max_wait_s=600)
    spans = agent_spans()
    replica.post(json_request(spans["tool"], spans["llm"]))
    clock.now_s += 599
    assert replica.assembly.sweep().traces == 0
    clock.now_s += 1
    assert replica.assembly.sweep().traces == 1
    assert queued_ids(redis_client, "agent_task_completion") == [TRACE_ID]


def test_a_trace_metric_is_not_produced_for_a_trace_without_a_trajectory(
    make_replica: Callable[..., Replica], clock: Clock, redis_client: redis.Redis,
) -> None:
    replica = make_replica(TRACE_METRIC)
    replica.post(json_request(*rag_spans().values()))
    clock.now_s += 3
    assert replica.assembly.sweep().traces == 1
    assert queued_ids(redis_client, "rag_qa") == [TRACE_ID]
    assert queued_ids(redis_client, "agent_task_completion") == []
