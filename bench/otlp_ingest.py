"""OTLP trace ingest: spans per second per core, and Redis memory per open trace.

    python -m bench.otlp_ingest [--traces 2000] [--rounds 5] [--repeat 3] [--rate 1.0]
                                [--broker-url redis://127.0.0.1:6379/0]

Realistic GenAI traces of 3 to 10 spans (a root, a retriever with four documents of
about 400 bytes, LLM spans carrying their messages as OTel GenAI JSON, tool spans),
built as protobuf export requests of up to 512 spans (what a BatchSpanProcessor sends).
Steps, each timed on its own in this one process (CPU seconds, so one core; the least
of ``--repeat`` runs, the buffered traces swept and deleted between runs; the garbage
collector tuned as ``evalfleet ingest`` tunes it):

1. decode: ``decode_protobuf`` alone;
2. decode + buffer: decoded and buffered in Redis (at ``--rate`` 1.0 every trace is kept;
   below it the traces not sampled are dropped before buffering);
   then the same requests again over HTTP, ``POST /v1/traces`` to the ingest app under
   uvicorn in a thread (the client's CPU is counted too);
3. sweep: the buffered traces mapped and produced as jobs (rag_qa's prompt, queue
   ``eval.bench_otlp``);
4. the JSON sample path beside it: as many sample records as traces through the producer
   pipeline.

Both paths run with the settings an ingest has by default: deduplication in Redis (one
``MGET`` and one marking script call a batch) and the queue limit on; the bench's
queue and deduplication keys are deleted between runs, so no run finds duplicates.

Redis memory per open trace is ``used_memory`` after buffering, less before, over the
traces buffered. A steady stream then runs rounds of 500 traces in and every due trace
out, printing open traces, Redis memory and this process's peak RSS after each. The
bench's keys (``evalfleet:otlp:*``, ``eval.bench_otlp``, ``evalfleet:dedupe:bench_otlp:*``)
are deleted before and after.

Figures, before and after the changes of its section, are in docs/performance.md,
section (h): on 2 cores loaded by other sessions, compare runs as ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import time
from collections.abc import Callable
from functools import partial
from importlib.metadata import version
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import httpx
import redis
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan

from evalfleet.core.gc_tuning import tune_collector
from evalfleet.core.metric import Metric, MetricRegistry, load_registry
from evalfleet.core.settings import Settings
from producers.dedupe.redis import KEY_PREFIX as DEDUPE_PREFIX
from producers.ingest import create_app
from producers.runtime import ProducerRuntime
from producers.traces import SpanLimits, decode_protobuf
from producers.traces.assembly import TraceAssembly
from testkit.served import Served

#: The bench's own metric, so its queue is ``eval.bench_otlp``.
METRIC = "bench_otlp"

#: Spans per export request, as the SDK's BatchSpanProcessor sends at most.
BATCH_SPANS = 512

_WORDS = ("subscription", "pause", "billing", "refund", "order", "delivery", "account",
          "plan", "invoice", "support", "premium", "cancel", "renew", "month", "policy")


def main() -> None:
    args = _parse_args()
    rng = random.Random(7)
    traces = [_trace(rng, n) for n in range(args.traces)]
    spans = sum(len(t) for t in traces)
    requests = _requests(traces)
    _print_setup(args, traces=traces, requests=requests)
    client = redis.Redis.from_url(args.broker_url)
    _clean(client)
    with TemporaryDirectory() as data_dir:
        # Deduplication in Redis and the queue limit as an ingest runs them by default.
        settings = Settings(broker_url=args.broker_url, data_dir=Path(data_dir),
                            otlp_max_open_traces=10 * args.traces)
        runtime = ProducerRuntime(settings, registry=_registry_with_bench_metric())
        buffer = runtime.trace_buffer()
        assembly = TraceAssembly(buffer=buffer, metrics={m.name: m for m in runtime.registry},
                                 pipeline=runtime.pipeline(metrics=[METRIC], rate=args.rate,
                                                           source="otlp"))
        tune_collector()  # as `evalfleet ingest` does once it has started
        try:
            limits = SpanLimits()
            decode_s = _best(args.repeat, lambda: [decode_protobuf(r, limits=limits,
                                                                   max_spans=10_000)
                                                   for r in requests])
            buffer_s, sweep_s = float("inf"), float("inf")
            for _ in range(args.repeat):  # the best of each step (the machine is shared)
                _clean(client)
                before = int(client.info("memory")["used_memory"])
                buffer_s = min(buffer_s, _cpu(lambda: [assembly.accept(decode_protobuf(
                    r, limits=limits, max_spans=10_000).spans) for r in requests]))
                open_traces = buffer.open_traces()
                per_trace = (int(client.info("memory")["used_memory"]) - before) / open_traces
                accepted: list[int] = []
                sweep_s = min(sweep_s, _cpu(partial(_sweep_into, assembly, accepted)))
                produced = accepted[0]
            _clean(client)  # the same traces again, over HTTP
            http_s = _best(1, lambda: _post_all(runtime, assembly, requests))
            _sweep_all(assembly)
            client.delete(f"eval.{METRIC}")
            pipeline = runtime.pipeline(metrics=[METRIC], rate=args.rate, source="file")
            records = [(f"line {n}", json.dumps(_sample(rng, n)).encode())
                       for n in range(args.traces)]
            samples_s = _best(args.repeat, lambda: [pipeline.process(records[i:i + 500])
                                                    for i in range(0, len(records), 500)],
                              before=partial(_clean, client))  # no run finds duplicates
            steady = _steady(assembly, client, rng, rounds=args.rounds, limits=limits)
        finally:
            runtime.close()
            _clean(client)
    print(f"\n{'step':<44} {'CPU s':>7} {'per second (one core)':>28}")
    print(f"{'decode (protobuf)':<44} {decode_s:7.2f} {spans / decode_s:>20,.0f} spans/s")
    print(f"{'decode + buffer in Redis':<44} {buffer_s:7.2f} {spans / buffer_s:>20,.0f} spans/s")
    print(f"{'POST /v1/traces (server and client here)':<44} {http_s:7.2f} "
          f"{spans / http_s:>20,.0f} spans/s")
    print(f"{'sweep: map + produce jobs':<44} {sweep_s:7.2f} "
          f"{open_traces / sweep_s:>19,.0f} traces/s")
    print(f"{'ingest CPU per span (buffer + sweep)':<44} {buffer_s + sweep_s:7.2f} "
          f"{spans / (buffer_s + sweep_s):>20,.0f} spans/s")
    print(f"{'JSON samples through the pipeline':<44} {samples_s:7.2f} "
          f"{args.traces / samples_s:>18,.0f} samples/s")
    print(f"\nopen traces buffered: {open_traces:,}; Redis memory per open trace: "
          f"{per_trace / 1024:,.1f} KiB; samples produced: {produced:,}")
    print("\nsteady stream (each round: 500 new traces buffered, then the due ones swept)")
    print(f"{'round':>5} {'open traces':>12} {'Redis used MiB':>15} {'ingest RSS MiB':>15}")
    for n, (open_now, redis_mib, rss_mib) in enumerate(steady, 1):
        print(f"{n:>5} {open_now:>12,} {redis_mib:>15.1f} {rss_mib:>15.1f}")


def _steady(assembly: TraceAssembly, client: redis.Redis, rng: random.Random, *, rounds: int,
            limits: SpanLimits) -> list[tuple[int, float, float]]:
    """Rounds of 500 new traces in, every due trace out: what stays in memory."""
    rows = []
    for n in range(rounds):
        requests = _requests([_trace(rng, 100_000 * (n + 1) + k) for k in range(500)])
        for request in requests:
            assembly.accept(decode_protobuf(request, limits=limits, max_spans=10_000).spans)
        _sweep_all(assembly)
        client.delete(f"eval.{METRIC}")
        rows.append((assembly_open(assembly), int(client.info("memory")["used_memory"]) / 2**20,
                     resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))
    return rows


def assembly_open(assembly: TraceAssembly) -> int:
    """Traces open in the assembly's buffer."""
    return assembly._buffer.open_traces()


def _post_all(runtime: ProducerRuntime, assembly: TraceAssembly, requests: list[bytes]) -> None:
    """Every request over HTTP to the ingest app under uvicorn in a thread of this process
    (so the CPU counted is the server's and the client's together)."""
    served = Served(create_app(runtime, tokens=None, metrics=[METRIC], traces=assembly))
    try:
        with httpx.Client(base_url=served.url, timeout=60) as http:
            for request in requests:
                answer = http.post("/v1/traces", content=request,
                                   headers={"Content-Type": "application/x-protobuf"})
                if answer.status_code != 200:
                    raise SystemExit(f"POST /v1/traces answered {answer.status_code}")
    finally:
        served.stop()


def _sweep_into(assembly: TraceAssembly, accepted: list[int]) -> None:
    accepted.append(_sweep_all(assembly))


def _sweep_all(assembly: TraceAssembly) -> int:
    """Sweep until nothing is due; the samples accepted."""
    accepted = 0
    while (sweep := assembly.sweep(now_s=float("inf"))).traces:
        accepted += sum(result.status == "accepted" for result in sweep.results)
    return accepted


def _best(repeat: int, run: Callable[[], Any], *,
          before: Callable[[], Any] | None = None) -> float:
    """The least CPU time of ``repeat`` runs, each after ``before`` (not timed)."""
    times = []
    for _ in range(repeat):
        if before is not None:
            before()
        times.append(_cpu(run))
    return min(times)


def _cpu(run: Callable[[], Any]) -> float:
    started = time.process_time()
    run()
    return time.process_time() - started


def _trace(rng: random.Random, n: int) -> list[ProtoSpan]:
    trace_id = rng.randbytes(16)
    root_id = rng.randbytes(8)
    start = 1_700_000_000_000_000_000 + n * 1_000_000_000
    spans = [_span(trace_id, root_id, b"", "POST /chat", start, start + 900_000_000,
                   {"http.route": "/chat", "http.request.method": "POST"})]
    docs = [_text(rng, 60) for _ in range(4)]
    spans.append(_span(trace_id, rng.randbytes(8), root_id, "retrieve", start + 1, start + 2, {
        "gen_ai.operation.name": "retrieval", "gen_ai.retrieval.query.text": _text(rng, 8),
        "gen_ai.retrieval.documents": json.dumps(
            [{"id": f"doc-{k}", "score": 0.9, "content": d} for k, d in enumerate(docs)])}))
    for k in range(rng.randint(1, 8)):
        if k % 2:
            spans.append(_span(trace_id, rng.randbytes(8), root_id, "tool", start + 3,
                               start + 4, {"gen_ai.operation.name": "execute_tool",
                                           "gen_ai.tool.name": "lookup_order"}))
            continue
        question = _text(rng, 20)
        spans.append(_span(trace_id, rng.randbytes(8), root_id, "chat gpt-x", start + 5,
                           start + 6, {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-x",
            "gen_ai.response.model": "gpt-x-2026-10", "gen_ai.usage.input_tokens": 700,
            "gen_ai.usage.output_tokens": 90,
            "gen_ai.input.messages": json.dumps([
                {"role": "system", "parts": [{"type": "text", "content": " ".join(docs)}]},
                {"role": "user", "parts": [{"type": "text", "content": question}]}]),
            "gen_ai.output.messages": json.dumps([
                {"role": "assistant", "finish_reason": "stop",
                 "parts": [{"type": "text", "content": _text(rng, 70)}]}])}))
    return spans


def _span(trace_id: bytes, span_id: bytes, parent: bytes, name: str, start: int, end: int,
          attributes: dict[str, Any]) -> ProtoSpan:
    return ProtoSpan(trace_id=trace_id, span_id=span_id, parent_span_id=parent, name=name,
                     kind=ProtoSpan.SPAN_KIND_INTERNAL, start_time_unix_nano=start,
                     end_time_unix_nano=end, attributes=[
                         KeyValue(key=k, value=AnyValue(int_value=v) if isinstance(v, int)
                                  else AnyValue(string_value=v)) for k, v in attributes.items()])


def _requests(traces: list[list[ProtoSpan]]) -> list[bytes]:
    requests, batch = [], []
    for trace in traces:
        batch.extend(trace)
        if len(batch) >= BATCH_SPANS:
            requests.append(_request(batch))
            batch = []
    if batch:
        requests.append(_request(batch))
    return requests


def _request(spans: list[ProtoSpan]) -> bytes:
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.add(key="service.name",
                                           value=AnyValue(string_value="support-bot"))
    resource_spans.scope_spans.add().spans.extend(spans)
    return request.SerializeToString()


def _sample(rng: random.Random, n: int) -> dict[str, Any]:
    return {"id": f"bench-otlp-{n:07d}", "input": _text(rng, 20), "output": _text(rng, 70),
            "context": [_text(rng, 60) for _ in range(4)],
            "attributes": {"app": "support-bot", "route": "/chat", "model": "gpt-x"}}


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def _registry_with_bench_metric(base_name: str = "rag_qa", name: str = METRIC) -> MetricRegistry:
    """The built-in metrics and a copy of ``base_name`` called ``name`` (its own queue)."""
    registry = load_registry()
    base = registry.get(base_name)
    bench = Metric(spec=base.spec.model_copy(update={"name": name}), version=base.version,
                   examples_text=base.examples_text, path=base.path)
    return MetricRegistry([*registry, bench])


def _clean(client: redis.Redis, metric: str = METRIC) -> None:
    """Delete the trace buffer's keys and ``metric``'s queue and deduplication keys."""
    keys = list(client.scan_iter("evalfleet:otlp:*", count=1000))
    keys += list(client.scan_iter(f"{DEDUPE_PREFIX}{metric}:*", count=1000))
    for start in range(0, len(keys), 1000):
        client.delete(*keys[start:start + 1000])
    client.delete(f"eval.{metric}")


def _print_setup(args: argparse.Namespace, *, traces: list[list[ProtoSpan]],
                 requests: list[bytes]) -> None:
    spans = sum(len(t) for t in traces)
    print(f"python {platform.python_version()}, protobuf {version('protobuf')}, "
          f"{os.cpu_count()} cores; Redis at {args.broker_url}; sampling rate {args.rate}")
    print(f"each step timed {args.repeat} times, the least CPU time shown; load average "
          f"{os.getloadavg()[0]:.1f} at the start")
    print(f"{len(traces):,} traces, {spans:,} spans ({spans / len(traces):.1f} per trace), "
          f"{len(requests)} protobuf requests of up to {BATCH_SPANS} spans, "
          f"{sum(map(len, requests)) / spans:,.0f} bytes per span on the wire")


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=2000)
    parser.add_argument("--broker-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rate", type=float, default=1.0,
                        help="sampling rate: the share of traces (and samples) kept")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each timed step; the least CPU time is printed")
    return parser.parse_args()


if __name__ == "__main__":
    main()
