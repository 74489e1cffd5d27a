"""Agent traces: assembled and produced per second per core, Redis memory per open agent
trace, and the worker's rendering of a trajectory into its budget.

    python -m bench.agent_traces [--traces 1000] [--repeat 3] [--tool-result-bytes 120]
                                 [--broker-url redis://127.0.0.1:6379/13]

Each trace is an agent run as pydantic-ai exports it (OTel GenAI): ten ``chat`` spans
(each with the whole conversation so far, the model's tool call as output and the offered
tools' definitions), nine ``execute_tool`` spans
with JSON arguments and a result of ``--tool-result-bytes``, and the ``invoke_agent``
root: 20 spans, about 30 KB on the wire, in protobuf requests of up to 512 spans. Steps,
each timed in this one process (CPU seconds, so one core; the least of ``--repeat``
runs):

1. decode + buffer: decoded and buffered in Redis;
2. sweep: each trace mapped to its sample with its trajectory and produced as a job of
   a trace-unit metric (``agent_task_completion``'s prompt, queue ``eval.bench_agent``);
3. render: each produced sample's prompt written by the worker's renderer, at the
   metric's budget (32,000 tokens) and at a budget that compacts every trajectory.

Redis memory per open agent trace is ``used_memory`` after buffering, less before, over
the traces buffered. Figures are in docs/performance.md, section (i).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import random
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import redis
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan

from bench import otlp_ingest
from bench.otlp_ingest import _best, _cpu, _requests, _span, _sweep_all, _text
from evalfleet.core.gc_tuning import tune_collector
from evalfleet.core.metric import Metric
from evalfleet.core.sample import Sample, parse_sample
from evalfleet.core.settings import Settings
from producers.runtime import ProducerRuntime
from producers.traces import SpanLimits, decode_protobuf
from producers.traces.assembly import TraceAssembly
from workers.renderer import render

#: The bench's own trace metric, so its queue is ``eval.bench_agent``.
METRIC = "bench_agent"

#: Tool calls per run (so 10 model calls, 9 tool calls and the agent: 20 spans).
TOOL_CALLS = 9


def main() -> None:
    args = _parse_args()
    rng = random.Random(11)
    traces = [_trace(rng, n, result_bytes=args.tool_result_bytes) for n in range(args.traces)]
    spans = sum(len(t) for t in traces)
    requests = _requests(traces)
    _print_setup(args, traces=traces, requests=requests)
    client = redis.Redis.from_url(args.broker_url)
    otlp_ingest._clean(client, METRIC)
    registry = otlp_ingest._registry_with_bench_metric("agent_task_completion", METRIC)
    with TemporaryDirectory() as data_dir:
        settings = Settings(broker_url=args.broker_url, data_dir=Path(data_dir),
                            otlp_max_open_traces=10 * args.traces)
        runtime = ProducerRuntime(settings, registry=registry)
        buffer = runtime.trace_buffer()
        assembly = TraceAssembly(buffer=buffer, metrics={m.name: m for m in runtime.registry},
                                 pipeline=runtime.pipeline(metrics=[METRIC], rate=1.0,
                                                           source="otlp"))
        tune_collector()
        limits = SpanLimits()
        buffer_s = sweep_s = float("inf")
        try:
            for _ in range(args.repeat):
                otlp_ingest._clean(client, METRIC)
                before = int(client.info("memory")["used_memory"])
                buffer_s = min(buffer_s, _cpu(lambda: [assembly.accept(decode_protobuf(
                    r, limits=limits, max_spans=10_000).spans) for r in requests]))
                open_traces = buffer.open_traces()
                per_trace = (int(client.info("memory")["used_memory"]) - before) / open_traces
                sweep_s = min(sweep_s, _cpu(lambda: _sweep_all(assembly)))
            samples = _queued_samples(client)
        finally:
            runtime.close()
            otlp_ingest._clean(client, METRIC)
    metric = registry.get(METRIC)
    tight = _with_budget(metric, 3_500)
    whole_s = _best(args.repeat, lambda: [render(metric, s) for s in samples])
    compact_s = _best(args.repeat, lambda: [render(tight, s) for s in samples])
    compacted = sum(render(tight, s).compaction is not None for s in samples)
    print(f"\n{'step':<46} {'CPU s':>7} {'per second (one core)':>26}")
    print(f"{'decode + buffer in Redis':<46} {buffer_s:7.2f} {spans / buffer_s:>18,.0f} spans/s")
    print(f"{'sweep: map (with trajectory) + produce jobs':<46} {sweep_s:7.2f} "
          f"{open_traces / sweep_s:>17,.0f} traces/s")
    print(f"{'assembled and produced (buffer + sweep)':<46} {buffer_s + sweep_s:7.2f} "
          f"{open_traces / (buffer_s + sweep_s):>17,.0f} traces/s")
    print(f"{'render at 32,000 tokens (fits whole)':<46} {whole_s:7.2f} "
          f"{len(samples) / whole_s:>17,.0f} traces/s")
    print(f"{'render at 3,500 tokens (compacted)':<46} {compact_s:7.2f} "
          f"{len(samples) / compact_s:>17,.0f} traces/s")
    print(f"\nopen agent traces buffered: {open_traces:,}; Redis memory per open agent trace: "
          f"{per_trace / 1024:,.1f} KiB; jobs produced: {len(samples):,}; "
          f"compacted at 3,500 tokens: {compacted:,}")


def _trace(rng: random.Random, n: int, *, result_bytes: int) -> list[ProtoSpan]:
    trace_id, root_id = rng.randbytes(16), rng.randbytes(8)
    start = 1_700_000_000_000_000_000 + n * 1_000_000_000
    tools = [{"type": "function", "name": f"tool_{k}", "description": _text(rng, 8),
              "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                             "required": ["query"]}} for k in range(3)]
    question = _text(rng, 20)
    spans = []
    # As pydantic-ai sends them: each model call carries the whole conversation so far.
    history: list[dict[str, Any]] = [{"role": "user",
                                      "parts": [{"type": "text", "content": question}]}]
    for k in range(TOOL_CALLS + 1):
        at = start + 10 * k
        last = k == TOOL_CALLS
        call_id = f"call_{n}_{k}"
        arguments = json.dumps({"query": _text(rng, 6)})
        output = ([{"type": "text", "content": _text(rng, 60)}] if last else
                  [{"type": "tool_call", "id": call_id, "name": f"tool_{k % 3}",
                    "arguments": arguments}])
        spans.append(_span(trace_id, rng.randbytes(8), root_id, "chat agent-model", at,
                           at + 4, {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "agent-model",
            "gen_ai.tool.definitions": json.dumps(tools),
            "gen_ai.input.messages": json.dumps(history),
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": output}])}))
        if last:
            break
        result = _text(rng, result_bytes // 6)[:result_bytes]
        spans.append(_span(trace_id, rng.randbytes(8), root_id, f"execute_tool tool_{k % 3}",
                           at + 5, at + 9, {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": f"tool_{k % 3}",
            "gen_ai.tool.call.id": call_id, "gen_ai.tool.call.arguments": arguments,
            "gen_ai.tool.call.result": result}))
        history += [{"role": "assistant", "parts": output},
                    {"role": "user", "parts": [{"type": "tool_call_response", "id": call_id,
                                                "result": result}]}]
    spans.append(_span(trace_id, root_id, b"", "invoke_agent agent", start, start + 200, {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "agent"}))
    return spans


def _queued_samples(client: redis.Redis) -> list[Sample]:
    """The samples of the jobs waiting in the bench's queue (batch messages unpacked)."""
    samples = []
    for raw in client.lrange(f"eval.{METRIC}", 0, -1):
        args, _, _ = json.loads(base64.b64decode(json.loads(raw)["body"]))
        samples.extend(parse_sample(job["sample"]) for job in args[0].get("jobs", [args[0]]))
    return samples


def _with_budget(metric: Metric, budget_tokens: int) -> Metric:
    judge = metric.spec.judge.model_copy(update={"budget_tokens": budget_tokens})
    return Metric(spec=metric.spec.model_copy(update={"judge": judge}), version=metric.version,
                  examples_text=metric.examples_text, path=metric.path)


def _print_setup(args: argparse.Namespace, *, traces: list[list[ProtoSpan]],
                 requests: list[bytes]) -> None:
    spans = sum(len(t) for t in traces)
    print(f"python {platform.python_version()}, {os.cpu_count()} cores; Redis at "
          f"{args.broker_url}; load average {os.getloadavg()[0]:.1f} at the start; each step "
          f"timed {args.repeat} times, the least CPU time shown")
    print(f"{len(traces):,} agent traces, {spans / len(traces):.0f} spans each, "
          f"{sum(map(len, requests)) / len(traces) / 1024:,.1f} KiB per trace on the wire, "
          f"{len(requests)} protobuf requests of up to 512 spans")


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=1000)
    parser.add_argument("--broker-url", default="redis://127.0.0.1:6379/13")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tool-result-bytes", type=int, default=120)
    return parser.parse_args()


if __name__ == "__main__":
    main()
