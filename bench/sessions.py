"""Sessions: conversations assembled and produced per second per core, and Redis memory
per open session.

    python -m bench.sessions [--sessions 10000] [--turns 5] [--repeat 3]
                             [--broker-url redis://127.0.0.1:6379/13]

Each session is ``--turns`` agent runs as pydantic-ai exports them (``bench.agent_traces``:
20 spans, about 30 KB on the wire per turn), every span carrying the session's
``gen_ai.conversation.id``. The traces are decoded and mapped to their samples first (the
trace stage, measured by ``bench.agent_traces``; not timed here). Then, timed in this one
process (CPU seconds, so one core; the least of ``--repeat`` runs):

1. offer: each trace's session read from its spans, its turn built and kept in Redis
   (one Lua script per sweep's traces, as the ingest does);
2. sweep: every session claimed, its version's sample built and produced as a job of a
   session-unit metric (``conversation_goal_completion``'s prompt, queue
   ``eval.bench_session``), and finished.

Redis memory per open session is ``used_memory`` after the turns are kept, less before,
over the sessions held. Figures are in docs/performance.md, section (j).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
from pathlib import Path
from tempfile import TemporaryDirectory

import redis

from bench import otlp_ingest
from bench.agent_traces import _trace
from bench.otlp_ingest import _cpu, _requests
from evalfleet.core.gc_tuning import tune_collector
from evalfleet.core.settings import Settings
from producers.runtime import ProducerRuntime
from producers.traces import SpanLimits, decode_protobuf
from producers.traces.buffer import ClaimedTrace
from producers.traces.config import SessionSpec, TraceSpec
from producers.traces.mapping import MappedSample, map_trace
from producers.traces.session_assembly import SessionAssembly
from producers.traces.span import Span

#: The bench's own session metric, so its queue is ``eval.bench_session``.
METRIC = "bench_session"

#: Traces offered per call, as one trace sweep hands them over.
OFFER_BATCH = 500


def main() -> None:
    args = _parse_args()
    rng = random.Random(13)
    traces = _mapped(rng, sessions=args.sessions, turns=args.turns)
    print(f"python {platform.python_version()}, {os.cpu_count()} cores; Redis at "
          f"{args.broker_url}; load average {os.getloadavg()[0]:.1f} at the start; each step "
          f"timed {args.repeat} times, the least CPU time shown")
    print(f"{args.sessions:,} sessions of {args.turns} turns, each turn an agent run of 20 "
          "spans (about 30 KB on the wire)")
    client = redis.Redis.from_url(args.broker_url)
    registry = otlp_ingest._registry_with_bench_metric("conversation_goal_completion", METRIC)
    with TemporaryDirectory() as data_dir:
        settings = Settings(broker_url=args.broker_url, data_dir=Path(data_dir),
                            otlp_max_open_sessions=2 * args.sessions)
        runtime = ProducerRuntime(settings, registry=registry)
        sessions = SessionAssembly(
            buffer=runtime.session_buffer(), metrics={m.name: m for m in runtime.registry},
            pipeline=runtime.pipeline(metrics=[METRIC], rate=1.0, source="otlp"))
        policy, spec = runtime.reloader.current(), SessionSpec()
        tune_collector()
        offer_s = sweep_s = float("inf")
        try:
            for _ in range(args.repeat):
                otlp_ingest._clean(client, METRIC)
                before = int(client.info("memory")["used_memory"])
                offer_s = min(offer_s, _cpu(lambda: [
                    sessions.offer(traces[n:n + OFFER_BATCH], policy=policy, spec=spec)
                    for n in range(0, len(traces), OFFER_BATCH)]))
                held = sessions.buffer.open_sessions()
                per_session = (int(client.info("memory")["used_memory"]) - before) / held
                sweep_s = min(sweep_s, _cpu(lambda: _sweep_all(sessions)))
            jobs = client.llen(f"eval.{METRIC}")
        finally:
            runtime.close()
            otlp_ingest._clean(client, METRIC)
    print(f"\n{'step':<46} {'CPU s':>7} {'per second (one core)':>26}")
    print(f"{'offer: session id, turn, keep in Redis':<46} {offer_s:7.2f} "
          f"{len(traces) / offer_s:>17,.0f} turns/s")
    print(f"{'sweep: claim, build the version, produce':<46} {sweep_s:7.2f} "
          f"{held / sweep_s:>15,.0f} sessions/s")
    print(f"{'sessions assembled (offer + sweep)':<46} {offer_s + sweep_s:7.2f} "
          f"{held / (offer_s + sweep_s):>15,.0f} sessions/s")
    print(f"\nopen sessions held: {held:,}; Redis memory per open session: "
          f"{per_session / 1024:,.1f} KiB ({per_session / args.turns / 1024:,.1f} KiB a turn); "
          f"job messages produced: {jobs:,}")


def _mapped(rng: random.Random, *, sessions: int,
            turns: int) -> list[tuple[ClaimedTrace, list[MappedSample]]]:
    """Every turn's trace decoded and mapped, in the order the turns were spoken."""
    protos = []
    for n in range(sessions * turns):
        trace = _trace(rng, n, result_bytes=120)
        for span in trace:
            attribute = span.attributes.add()
            attribute.key = "gen_ai.conversation.id"
            attribute.value.string_value = f"conv-{n % sessions}"
        protos.append(trace)
    by_trace: dict[str, list[Span]] = {}
    for request in _requests(protos):
        for span in decode_protobuf(request, limits=SpanLimits(), max_spans=10_000).spans:
            by_trace.setdefault(span.trace_id, []).append(span)
    spec = TraceSpec()
    return [(ClaimedTrace(trace_id, spans), map_trace(spans, spec=spec).samples)
            for trace_id, spans in by_trace.items()]


def _sweep_all(sessions: SessionAssembly) -> int:
    produced = 0
    while (sweep := sessions.sweep(now_s=float("inf"), limit=500)).sessions:
        produced += sweep.sessions
    return produced


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--broker-url", default="redis://127.0.0.1:6379/13")
    parser.add_argument("--repeat", type=int, default=3)
    return parser.parse_args()


if __name__ == "__main__":
    main()
