"""Enqueue rate: one job per publish (``Enqueuer.send``) against batches in one Redis
pipeline (``Enqueuer.send_many``), and the whole producer path (validate, sample,
redact, deduplicate, backpressure, publish) for JSONL lines.

    python bench/enqueue_rate.py [--jobs 5000] [--batch-sizes 100 500 2000]
                                 [--broker-url redis://127.0.0.1:6379/0]

Jobs go to a queue of their own (``eval.bench_enqueue``), emptied before and after
each run; nothing else in the database is touched. ``send_many`` and the pipeline put
``EVALFLEET_BATCH_SIZE`` jobs in one message (16 by default), so each run's jobs are
counted by decoding the messages queued. Prints the setup and a table.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from tempfile import TemporaryDirectory

import redis

from evalfleet.core.message import Job, decode_batch, new_job
from evalfleet.core.metric import Metric, MetricRegistry, load_registry
from evalfleet.core.sample import parse_sample
from evalfleet.core.settings import Settings
from producers.enqueuer import Enqueuer
from producers.runtime import ProducerRuntime

#: The bench's own metric, so its queue is ``eval.bench_enqueue``.
METRIC = "bench_enqueue"


def main() -> None:
    args = _parse_args()
    client = redis.Redis.from_url(args.broker_url)
    queue = f"eval.{METRIC}"
    records = [_record(n) for n in range(args.jobs)]
    jobs = [new_job(METRIC, parse_sample(r)) for r in records]
    with TemporaryDirectory() as data_dir:
        settings = Settings(broker_url=args.broker_url, data_dir=Path(data_dir),
                            dedupe_window_s=0, max_queue_depth=0)
        _print_setup(args, payload_bytes=len(json.dumps(records[0])),
                     jobs_per_message=settings.broker.batch_size)
        rows = [("send, one job per publish", _rate(lambda: _send_each(settings, jobs),
                                                    args.jobs, client, queue))]
        for size in args.batch_sizes:
            rows.append((f"send_many, batches of {size}",
                         _rate(lambda size=size: _send_many(settings, jobs, size),  # type: ignore[misc]
                               args.jobs, client, queue)))
        lines = [(f"line {n}", json.dumps(r).encode()) for n, r in enumerate(records, 1)]
        runtime = ProducerRuntime(settings, registry=_registry_with_bench_metric())
        try:
            rows.append((f"whole pipeline, batches of {args.pipeline_batch}",
                         _rate(lambda: _pipeline(runtime, lines, args.pipeline_batch),
                               args.jobs, client, queue)))
        finally:
            runtime.close()
    client.delete(queue)
    baseline = rows[0][1][0]
    print(f"\n{'path':<36} {'jobs/s':>8} {'vs send':>8} {'messages':>9}")
    for name, (rate, messages) in rows:
        print(f"{name:<36} {rate:>8,.0f} {rate / baseline:>7.1f}x {messages:>9,}")


def _send_each(settings: Settings, jobs: list[Job]) -> None:
    enqueuer = Enqueuer(settings)
    try:
        for job in jobs:
            enqueuer.send(job)
    finally:
        enqueuer.close()


def _send_many(settings: Settings, jobs: list[Job], size: int) -> None:
    enqueuer = Enqueuer(settings, batch_size=size)
    try:
        for start in range(0, len(jobs), size):
            enqueuer.send_many(jobs[start:start + size])
    finally:
        enqueuer.close()


def _pipeline(runtime: ProducerRuntime, lines: list[tuple[str, bytes]], size: int) -> None:
    pipeline = runtime.pipeline(metrics=[METRIC], rate=1.0, source="bench")
    for start in range(0, len(lines), size):
        pipeline.process(lines[start:start + size])


def _registry_with_bench_metric() -> MetricRegistry:
    registry = load_registry()
    base = registry.get("rag_qa")
    bench = Metric(spec=base.spec.model_copy(update={"name": METRIC}), version=base.version,
                   examples_text=base.examples_text, path=base.path)
    return MetricRegistry([*registry, bench])


def _rate(run: Callable[[], None], jobs: int, client: redis.Redis,
          queue: str) -> tuple[float, int]:
    """Jobs per second of ``run``, and the messages it queued."""
    client.delete(queue)
    started = time.perf_counter()
    run()
    elapsed_s = time.perf_counter() - started
    messages = client.lrange(queue, 0, -1)
    client.delete(queue)
    queued = sum(_jobs_in(raw) for raw in messages)
    if queued != jobs:
        raise SystemExit(f"expected {jobs} jobs in {queue}, found {queued} "
                         f"in {len(messages)} messages")
    return jobs / elapsed_s, len(messages)


def _jobs_in(raw: bytes) -> int:
    """Jobs in one message as kombu keeps it in Redis (a JSON envelope, the task's
    arguments base64-encoded in its body)."""
    args, _, _ = json.loads(base64.b64decode(json.loads(raw)["body"]))
    return len(decode_batch(args[0]))


def _record(n: int) -> dict[str, object]:
    return {
        "id": f"bench-{n:07d}", "timestamp": "2026-11-21T10:00:00Z",
        "input": f"How many days do I have to return order #{1000 + n}?",
        "output": f"You have {14 + n % 3} days to return order #{1000 + n}.",
        "context": [f"Orders can be returned within {14 + n % 3} days of delivery.",
                    "Refunds are issued to the original payment method within 5 days."],
        "reference": f"{14 + n % 3} days",
        "attributes": {"app": "support-bot", "route": "/chat", "prompt_version": "v12"},
    }


def _print_setup(args: argparse.Namespace, *, payload_bytes: int,
                 jobs_per_message: int) -> None:
    print("enqueue rate benchmark")
    print(f"  jobs per run:  {args.jobs:,} (sample record {payload_bytes} bytes as JSON); "
          f"send_many puts up to {jobs_per_message} in a message (EVALFLEET_BATCH_SIZE)")
    print(f"  broker:        {args.broker_url} (queue eval.{METRIC})")
    print(f"  python {platform.python_version()}, celery {version('celery')}, "
          f"kombu {version('kombu')}, redis-py {version('redis')}, "
          f"{os.cpu_count()} CPUs, {platform.machine()}")
    print("  whole pipeline: validate, limits, sampling at 1.0, redaction, queue depth, "
          "publish (deduplication off; metric files loaded beforehand)")


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[100, 500, 2000])
    parser.add_argument("--pipeline-batch", type=int, default=500)
    parser.add_argument("--broker-url", default="redis://127.0.0.1:6379/0")
    return parser.parse_args()


if __name__ == "__main__":
    main()
