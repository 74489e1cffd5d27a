"""One worker process against the judge simulator: verdicts/s, CPU per verdict, peak RSS.

Setup: a fresh Postgres database, a Redis database, the simulator in its own
process at a fixed latency, N rag_qa jobs enqueued before the worker starts,
then one ``evalfleet worker`` process per concurrency level. Throughput is
compared with the ceiling C / L (concurrency over judge latency).

    python bench/worker_throughput.py --jobs 2000 --latency-ms 500 --concurrency 64 256

Needs Postgres and Redis on 127.0.0.1 (as the tests do). Prints a table.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import redis
from celery import Celery

from evalfleet.message import EVALUATE_TASK, Job, encode_batch, new_job
from evalfleet.sample import parse_sample
from evalfleet.settings import Settings
from workers.store import migrate, open_store

POSTGRES_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
DATABASE = "evalfleet_bench"
REDIS_URL = "redis://127.0.0.1:6379/14"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--latency-ms", type=float, default=500)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--batch-size", type=int, default=16, help="Jobs per message.")
    parser.add_argument("--judge-client", choices=["http", "openai"], default="http")
    args = parser.parse_args()

    sim, base_url = start_simulator(args.latency_ms)
    print(f"setup: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"python {platform.python_version()}, judge client {args.judge_client}, "
          f"{args.jobs} rag_qa jobs in messages of {args.batch_size}, "
          f"judge latency {args.latency_ms:g} ms (simulator in its own process)")
    print(f"{'C':>6} {'verdicts/s':>11} {'C/L':>8} {'of C/L':>7} {'CPU ms/verdict':>15} "
          f"{'peak RSS MB':>12}")
    try:
        for concurrency in args.concurrency:
            row = run_one(concurrency=concurrency, jobs=args.jobs, base_url=base_url,
                          batch_size=args.batch_size, judge_client=args.judge_client)
            ceiling = concurrency / (args.latency_ms / 1000)
            print(f"{concurrency:>6} {row['rate']:>11.1f} {ceiling:>8.1f} "
                  f"{row['rate'] / ceiling:>7.0%} {row['cpu_ms']:>15.2f} {row['rss_mb']:>12.0f}",
                  flush=True)
    finally:
        sim.terminate()
        sim.wait()


def start_simulator(latency_ms: float) -> tuple[subprocess.Popen[str], str]:
    sim = subprocess.Popen(
        [sys.executable, "-m", "evalfleet", "judge-sim", "--port", "0",
         "--latency-ms", str(latency_ms)], stderr=subprocess.PIPE, text=True)
    assert sim.stderr is not None
    for line in sim.stderr:
        match = re.search(r"listening on (\S+)", line)
        if match:
            return sim, match.group(1)
    raise RuntimeError("the simulator did not start")


def run_one(*, concurrency: int, jobs: int, base_url: str, batch_size: int,
            judge_client: str) -> dict[str, float]:
    settings = fresh_services(base_url).model_copy(
        update={"batch_size": batch_size, "judge_client": judge_client})
    enqueue(settings, jobs)
    store = open_store(settings.resolved_database_url())
    log_path = Path(f"/tmp/evalfleet-bench-worker-{concurrency}.log")
    with log_path.open("wb") as log:  # the child keeps its own copy of the descriptor
        worker = subprocess.Popen(
            [sys.executable, "-m", "evalfleet", "worker", "--queues", "rag_qa",
             "--concurrency", str(concurrency), "--loglevel", "WARNING"],
            env={**os.environ, **settings.as_environment()}, stdout=log,
            stderr=subprocess.STDOUT)
    try:
        while store.counts().verdicts == 0:
            time.sleep(0.01)
        started, cpu_start, done_start = time.monotonic(), cpu_s(worker.pid), store.counts()
        while store.counts().verdicts < jobs:
            time.sleep(0.05)
            if worker.poll() is not None:
                raise RuntimeError(f"worker exited, see {log_path}")
        elapsed = time.monotonic() - started
        measured = jobs - done_start.verdicts
        return {"rate": measured / elapsed,
                "cpu_ms": (cpu_s(worker.pid) - cpu_start) * 1000 / measured,
                "rss_mb": peak_rss_mb(worker.pid)}
    finally:
        worker.terminate()
        worker.wait()
        store.close()


def fresh_services(base_url: str) -> Settings:
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {DATABASE}")
    redis.Redis.from_url(REDIS_URL).flushdb()
    settings = Settings(
        database_url=f"postgresql+psycopg://postgres@127.0.0.1:5432/{DATABASE}",
        broker_url=REDIS_URL, openai_base_url=base_url, judge_model="judge-sim",
        judge_timeout_s=30, retry_max_s=60, visibility_timeout_s=900,
    )
    store = open_store(settings.resolved_database_url())
    migrate(store.engine)
    store.close()
    return settings


def enqueue(settings: Settings, jobs: int) -> None:
    """Publish the jobs as the producers do: batches of ``batch_size`` per message."""
    app = Celery("bench-producer", broker=settings.resolved_broker_url(), set_as_current=False)
    batch: list[Job] = []
    with app.producer_or_acquire() as producer:
        for n in range(jobs):
            batch.append(new_job("rag_qa", parse_sample({
                "id": f"bench-{n}", "input": f"How long is the return window for order {n}?",
                "output": "30 days from delivery.",
                "context": ["Returns: 30 days from delivery."],
                "reference": "30 days", "attributes": {"app": "bench", "route": "/chat"},
            })))
            if len(batch) == settings.batch_size or n == jobs - 1:
                app.send_task(EVALUATE_TASK, args=[encode_batch(batch)], queue="eval.rag_qa",
                              producer=producer)
                batch = []
    app.close()


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


if __name__ == "__main__":
    main()
