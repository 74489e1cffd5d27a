"""Where a worker's CPU per verdict goes: each step of the hot path, timed on its own.

Setup: one process. The pure steps (decode, render, encode, read, parse, store
preparation, telemetry) run on a rag_qa job and the simulator's reply to it; the
claim and the save run against Postgres on this machine (16 keys or verdicts per
round trip, as a message of 16 does; CPU of this process only); the HTTP call runs
against the judge simulator in its own process. Last, the evaluator alone, without
Celery or a broker: batches of 16 from task threads through the real judge fleet
and store at concurrency C, with Python's garbage collector as it comes and as a
worker tunes it (:func:`evalfleet.core.gc_tuning.tune_collector`), its share measured by
collector callbacks.

    python -m bench.hot_path --jobs 4000 --concurrency 256 --latency-ms 500

Compare the evaluator's figure with ``bench.worker_throughput`` at the same C and L:
the difference is Celery, kombu and the broker.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import os
import platform
import statistics
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry

from bench.judge_client import run_http
from bench.worker_throughput import (
    bench_sample,
    fresh_services,
    release_services,
    start_simulator,
)
from evalfleet.core.gc_tuning import tune_collector
from evalfleet.core.message import decode_batch, encode_batch, new_job
from evalfleet.core.metric import load_registry
from evalfleet.core.settings import Settings
from evalfleet.store import VerdictKey, VerdictRecord, open_store
from evalfleet.store.storable import storable_verdict
from workers.judge import JudgeRequest
from workers.judge.reply import reply_from_body
from workers.renderer import render_messages
from workers.runtime import build_runtime, task_slots
from workers.telemetry import Telemetry
from workers.verdicts import parse_verdict, response_format_for

BATCH = 16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=4000,
                        help="Jobs for the evaluator run (the steps run on their own).")
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--latency-ms", type=float, default=500)
    args = parser.parse_args()
    print(f"setup: {platform.machine()}, {os.cpu_count()} cores, python "
          f"{platform.python_version()}, rag_qa, messages of {BATCH}, Postgres on this "
          f"machine, judge simulator in its own process; each step the median of 5 "
          f"repeats, in microseconds of this process's CPU per verdict")
    sim, base_url = start_simulator(args.latency_ms)
    try:
        settings = fresh_services(base_url)
        steps = pure_steps(base_url) + store_steps(settings) + [
            ("HTTP call (lean client, C = 64, L = 20 ms)", http_call_us())]
        for name, micros in steps:
            print(f"  {name:<46} {micros:>8.1f}")
        print(f"  {'sum of the steps':<46} {sum(micros for _, micros in steps):>8.1f}")
        print(f"evaluator alone, {args.jobs} jobs, C = {args.concurrency}, "
              f"L = {args.latency_ms:g} ms:")
        print(f"  {'collector':<10} {'verdicts/s':>11} {'CPU us/verdict':>15} "
              f"{'of it collecting':>17}")
        for tuned in (False, True):
            rate, cpu_us, collecting = evaluator_run(
                fresh_services(base_url), jobs=args.jobs, concurrency=args.concurrency,
                tuned=tuned)
            print(f"  {'tuned' if tuned else 'default':<10} {rate:>11.1f} {cpu_us:>15.0f} "
                  f"{collecting:>16.0%}", flush=True)
    finally:
        sim.terminate()
        sim.wait()
        release_services()


def bench_request() -> JudgeRequest:
    """The judge request a worker sends for ``bench_sample(0)``."""
    metric = load_registry().get("rag_qa")
    return JudgeRequest(messages=render_messages(metric, bench_sample(0)), model="judge-sim",
                        temperature=0.0, max_tokens=1024,
                        response_format=response_format_for(metric, supported="json_schema"),
                        metric="rag_qa")


def pure_steps(base_url: str) -> list[tuple[str, float]]:
    """The steps that touch no service, on the simulator's real reply."""
    metric = load_registry().get("rag_qa")
    message = json.loads(json.dumps(encode_batch(
        [new_job("rag_qa", bench_sample(n)) for n in range(BATCH)])))
    sample = bench_sample(0)
    request = bench_request()
    body = simulator_body(base_url, request)
    reply = reply_from_body(body, latency_ms=500)
    verdict = parse_verdict(reply.text, metric=metric, sample=sample)
    record = verdict_record(0, scores=getattr(verdict, "scores", {}), raw_output=reply.text or "")
    telemetry = Telemetry(registry=CollectorRegistry(), segment_keys=("app",))

    def observe() -> None:
        telemetry.record_verdict(metric="rag_qa", status="ok", error_class=None,
                                 attributes=record.attributes, scores=record.scores,
                                 sample_ts=record.sample_ts, created_at=record.created_at)
        telemetry.record_cost(metric="rag_qa", judge_model="judge-sim", prompt_tokens=900,
                              completion_tokens=120, cost_usd=None)

    return [
        ("decode the message (per job)", per_call_us(lambda: decode_batch(message)) / BATCH),
        ("render the prompt", per_call_us(lambda: render_messages(metric, sample))),
        ("encode the request body", per_call_us(lambda: json.dumps(request.payload()))),
        ("read the reply body", per_call_us(lambda: reply_from_body(body, latency_ms=500))),
        ("parse the verdict", per_call_us(
            lambda: parse_verdict(reply.text, metric=metric, sample=sample))),
        ("make the record storable", per_call_us(lambda: storable_verdict(record))),
        ("count it (Prometheus)", per_call_us(observe)),
    ]


def store_steps(settings: Settings) -> list[tuple[str, float]]:
    """Claim and save on Postgres, a message's worth per round trip."""
    store = open_store(settings.resolved_database_url())
    counter = itertools.count()
    try:
        def claim_and_save() -> tuple[float, float]:
            batch = next(counter)
            keys = [VerdictKey(f"b{batch}-{n}", "rag_qa", "v1", "judge-sim")
                    for n in range(BATCH)]
            owner = f"message-{batch}"
            claimed = cpu_us(lambda: store.claim(keys, owner=owner, lease_s=60,
                                                 now=datetime.now(UTC)))
            records = [verdict_record(n, key=key) for n, key in enumerate(keys)]
            saved = cpu_us(lambda: store.save(verdicts=records, release=keys, owner=owner))
            return claimed / BATCH, saved / BATCH

        for _ in range(20):  # warm the pool and the statement caches
            claim_and_save()
        pairs = [claim_and_save() for _ in range(200)]
    finally:
        store.close()
    return [("claim (per key, 16 a round trip)", statistics.median(c for c, _ in pairs)),
            ("save (per verdict, 16 a transaction)", statistics.median(s for _, s in pairs))]


def http_call_us() -> float:
    """CPU of one judge call through the lean client (C = 64, a simulator at 20 ms)."""
    sim, base_url = start_simulator(20)
    request = bench_request()
    try:
        asyncio.run(run_http(base_url, request, 256, 64))  # warm the caches
        return statistics.median(
            cpu_us(lambda: asyncio.run(run_http(base_url, request, 2000, 64))) / 2000
            for _ in range(3))
    finally:
        sim.terminate()
        sim.wait()


def evaluator_run(settings: Settings, *, jobs: int, concurrency: int,
                  tuned: bool) -> tuple[float, float, float]:
    """Verdicts/s, CPU per verdict and the collector's share, Celery and broker aside."""
    runtime = build_runtime(settings, concurrency=concurrency)
    batches = [[new_job("rag_qa", bench_sample(n)) for n in range(start, start + BATCH)]
               for start in range(0, jobs, BATCH)]
    threshold = gc.get_threshold()
    if tuned:
        tune_collector()
    try:
        with collector_time() as collected:
            started, cpu_before = time.monotonic(), time.process_time()
            with ThreadPoolExecutor(task_slots(settings, concurrency=concurrency)) as pool:
                for outcomes in pool.map(lambda pair: runtime.evaluator.run_batch(
                        pair[1], owner=f"message-{pair[0]}"), enumerate(batches)):
                    assert all(outcome.kind == "stored" for outcome in outcomes), outcomes
            cpu_s, elapsed = time.process_time() - cpu_before, time.monotonic() - started
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
        runtime.evaluator.judge.close()
        runtime.store.close()
    done = len(batches) * BATCH
    return done / elapsed, 1e6 * cpu_s / done, collected[0] / cpu_s


@contextmanager
def collector_time() -> Iterator[list[float]]:
    """The CPU seconds the garbage collector takes meanwhile, in a one-item list."""
    total = [0.0]
    began: dict[int, float] = {}

    def callback(phase: str, _: dict[str, Any]) -> None:
        if phase == "start":
            began[threading.get_ident()] = time.thread_time()
        else:
            total[0] += time.thread_time() - began.pop(threading.get_ident(), time.thread_time())

    gc.callbacks.append(callback)
    try:
        yield total
    finally:
        gc.callbacks.remove(callback)


def verdict_record(n: int, *, key: VerdictKey | None = None, scores: dict[str, Any] | None = None,
                   raw_output: str = '{"faithfulness": 1.0}') -> VerdictRecord:
    now = datetime.now(UTC)
    scores = scores or {"faithfulness": 1.0, "context_relevance": 0.5,
                        "answer_relevance": 1.0, "semantic_similarity": 1.0}
    return VerdictRecord(
        key=key or VerdictKey(f"bench-{n}", "rag_qa", "v1", "judge-sim"), status="ok",
        error_class=None, error=None, reason=None, scores=scores, raw_scores=dict(scores),
        raw_output=raw_output, attempts=1, latency_ms=500, prompt_tokens=900,
        completion_tokens=120, attributes={"app": "bench", "route": "/chat"}, sample_ts=now,
        created_at=now)


def simulator_body(base_url: str, request: JudgeRequest) -> bytes:
    """The simulator's answer to ``request``, the body the client reads."""
    post = urllib.request.Request(
        base_url.rstrip("/") + "/chat/completions", data=json.dumps(request.payload()).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(post, timeout=30) as answer:
        return bytes(answer.read())


def per_call_us(call: Callable[[], object], *, number: int = 2000) -> float:
    return statistics.median(cpu_us(lambda: [call() for _ in range(number)]) / number
                             for _ in range(5))


def cpu_us(call: Callable[[], object]) -> float:
    before = time.process_time()
    call()
    return 1e6 * (time.process_time() - before)


if __name__ == "__main__":
    main()
