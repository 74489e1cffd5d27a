"""evalfleet's worker CPU per verdict beside a naive Celery judge task, alternated.

The naive task is what a team writes first: one Celery task per sample on the gevent
pool (``-P gevent -c C``), the synchronous ``openai`` client, the reply's JSON read with
``json.loads``, and one ``INSERT`` per verdict through a ``psycopg_pool`` pool. evalfleet:
one ``evalfleet worker --concurrency C`` on rag_qa jobs in messages of 16
(``bench.worker_throughput.run_one``). Both drain N jobs from Redis against the judge
simulator (its own process, latency L) into a fresh Postgres database; the figure is
each worker process's CPU over the steady part, per verdict.

    python -m bench.naive_celery --jobs 3000 --concurrency 256 --latency-ms 500 --rounds 2

Needs gevent and psycopg_pool (the dev extra), Postgres and Redis on 127.0.0.1. psycopg
(3.1.14 on) waits cooperatively once Celery's ``-P gevent`` has patched ``select``, which
``celery`` does before it imports this module. The naive worker is CPU-bound on a busy
machine, so its share of C/L is low; the figure that matters is CPU per verdict. Prints
one row per side and round, the ratios and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

import psycopg
from celery import Celery

from bench.worker_throughput import (
    bench_sample,
    cpu_s,
    fresh_services,
    release_services,
    run_one,
    start_simulator,
)
from evalfleet.core.metric import load_registry
from workers.renderer import render_messages

#: The naive worker's configuration, from its environment.
BROKER = os.environ.get("NAIVE_BROKER", "redis://127.0.0.1:6379/0")
DSN = os.environ.get("NAIVE_DSN", "")
JUDGE = os.environ.get("NAIVE_JUDGE", "")
POOL = int(os.environ.get("NAIVE_POOL", "20"))

app = Celery("naive", broker=BROKER)
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    task_ignore_result=True,
    worker_prefetch_multiplier=1,
    task_acks_late=True,
    worker_hijack_root_logger=False,
)

_state: dict[str, Any] = {}
_state_lock = threading.Lock()  # a greenlet lock under gevent: one pool, not one per task


def _clients() -> tuple[Any, Any]:
    """The process's openai client and connection pool, made on first use (after fork)."""
    with _state_lock:
        if not _state:
            import openai
            from psycopg_pool import ConnectionPool

            _state["pool"] = ConnectionPool(DSN, min_size=1, max_size=POOL, open=True)
            _state["judge"] = openai.OpenAI(
                base_url=JUDGE, api_key="not-needed", max_retries=0, timeout=30
            )
    return _state["judge"], _state["pool"]


@app.task(name="naive.judge")
def judge(sample_id: str, messages: list[dict[str, str]]) -> None:
    """One sample: one call, one parse, one INSERT."""
    client, pool = _clients()
    reply = client.chat.completions.create(
        model="judge-sim", messages=messages, temperature=0.0, max_tokens=400
    )
    text = reply.choices[0].message.content or ""
    try:
        score = float(json.loads(text).get("score", 0))
    except (ValueError, AttributeError, TypeError):
        score = 0.0
    with pool.connection() as connection:
        connection.execute(
            "INSERT INTO naive_verdicts (sample_id, score, reply) VALUES (%s, %s, %s)",
            (sample_id, score, text),
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--latency-ms", type=float, default=500)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    ceiling = args.concurrency / args.latency_ms * 1000
    print(
        f"setup: {os.cpu_count()} cores, {args.jobs} rag_qa jobs a run, C = {args.concurrency}, "
        f"judge latency L = {args.latency_ms:g} ms (simulator in its own process), ceiling "
        f"C/L = {ceiling:.0f}/s, {args.rounds} rounds alternated, naive first; Postgres and "
        f"Redis on this machine; load average at start {os.getloadavg()}",
        flush=True,
    )
    sim, base_url = start_simulator(args.latency_ms)
    rows: list[tuple[str, dict[str, float]]] = []
    try:
        for number in range(args.rounds):
            print(f"round {number + 1}", file=sys.stderr, flush=True)  # progress, off the table
            rows.append(
                (
                    "naive",
                    run_naive(jobs=args.jobs, concurrency=args.concurrency, base_url=base_url),
                )
            )
            rows.append(
                (
                    "evalfleet",
                    run_one(
                        concurrency=args.concurrency,
                        jobs=args.jobs,
                        base_url=base_url,
                        batch_size=16,
                        judge_client="http",
                    ),
                )
            )
    finally:
        sim.terminate()
        release_services()
    print(f"{'side':<10} {'verdicts/s':>10} {'of C/L':>7} {'CPU ms/verdict':>15}")
    for side, row in rows:
        print(
            f"{side:<10} {row['rate']:>10.0f} {row['rate'] / ceiling:>7.0%} {row['cpu_ms']:>15.2f}"
        )
    naive = [row["cpu_ms"] for side, row in rows if side == "naive"]
    ours = [row["cpu_ms"] for side, row in rows if side == "evalfleet"]
    print(
        "evalfleet / naive per round: "
        + ", ".join(f"1/{n / e:.1f}" for n, e in zip(naive, ours, strict=True))
    )
    print(f"load average at end {os.getloadavg()}")


def run_naive(*, jobs: int, concurrency: int, base_url: str) -> dict[str, float]:
    """Drain ``jobs`` naive tasks with one gevent worker; its CPU over the steady part."""
    settings = fresh_services(base_url)
    dsn = settings.resolved_database_url().replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(
            "CREATE TABLE naive_verdicts (id bigserial PRIMARY KEY, "
            "sample_id text NOT NULL, score double precision, reply text)"
        )
    metric = load_registry().get("rag_qa")
    sender = Celery("naive-producer", broker=settings.resolved_broker_url(), set_as_current=False)
    with sender.producer_or_acquire() as producer:
        for n in range(jobs):
            sample = bench_sample(n)
            sender.send_task(
                "naive.judge",
                args=[sample.id, render_messages(metric, sample)],
                queue="naive",
                producer=producer,
            )
    sender.close()
    env = {
        **os.environ,
        "NAIVE_BROKER": settings.resolved_broker_url(),
        "NAIVE_DSN": dsn,
        "NAIVE_JUDGE": base_url,
    }
    with open("/tmp/naive-celery.log", "w") as log:  # the child keeps its own descriptor
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "bench.naive_celery",
                "worker",
                "-P",
                "gevent",
                "-c",
                str(concurrency),
                "-Q",
                "naive",
                "--loglevel",
                "WARNING",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    try:
        with psycopg.connect(dsn, autocommit=True) as connection:

            def stored() -> int:
                row = connection.execute("SELECT count(*) FROM naive_verdicts").fetchone()
                return int(row[0]) if row else 0

            while stored() == 0:
                time.sleep(0.01)
                if worker.poll() is not None:
                    raise RuntimeError("the naive worker exited, see /tmp/naive-celery.log")
            started, done_start, cpu_start = time.monotonic(), stored(), cpu_s(worker.pid)
            while stored() < jobs:
                time.sleep(0.05)
                if worker.poll() is not None:
                    raise RuntimeError("the naive worker exited, see /tmp/naive-celery.log")
            elapsed = time.monotonic() - started
            measured = jobs - done_start
            return {
                "rate": measured / elapsed,
                "cpu_ms": (cpu_s(worker.pid) - cpu_start) * 1000 / measured,
            }
    finally:
        worker.terminate()
        worker.wait()


if __name__ == "__main__":
    main()
