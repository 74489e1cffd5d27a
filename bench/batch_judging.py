"""Synchronous against batch judging, for the same jobs: worker CPU per verdict, judge
HTTP requests per 1,000 verdicts, judge cost, and time to the last verdict.

Setup: the judge simulator in its own process (chat latency ``--latency-ms``; a batch
finishes ``--turnaround-s`` after its creation), a fresh Postgres database and Redis
database per mode, N rag_qa jobs enqueued as the producers send them, then one
``evalfleet worker`` (``--concurrency``) and, in batch mode, one ``evalfleet beat``
(``batch_poll_s`` = ``--poll-s``, batches of at most ``--batch-requests``, sent once full
or after ``--poll-s``). CPU is the worker's (and in batch mode the beat's, which parses
and stores batch verdicts) from /proc, from the moment both are ready (start-up left
out) to the last verdict. Time to the last verdict runs from the first job enqueued.
Judge requests are what the simulator counted: chat completions, or Batch API calls
(uploads, creations, polls, downloads); batch lines are the lines the simulator
accepted in batches, and how many of them repeated a custom id already sent. Cost at
``model_prices`` of (0.15, 0.60) $/Mtok, the batch price half.

    python -m bench.batch_judging --jobs 2000 --turnaround-s 5
    python -m bench.batch_judging --trees /tmp/base . --modes batch --repeat 2

``--trees`` runs the worker and the beat from other source trees (a checkout of an older
commit) in the same run, alternated, so before and after share one machine state;
``--repeat`` runs every tree that many times, in turn.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from bench.worker_throughput import (
    cpu_s,
    enqueue,
    fresh_services,
    release_services,
    sim_call,
    start_simulator,
    start_worker,
    tree_label,
)
from evalfleet.core.settings import Settings

PRICE = (0.15, 0.60)
BEAT_LOG = Path("/tmp/evalfleet-bench-beat.log")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--turnaround-s", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--poll-s", type=float, default=1.0)
    parser.add_argument("--batch-requests", type=int, default=1000)
    parser.add_argument("--trees", nargs="+", type=Path, default=[Path(".")],
                        help="Source trees to run the worker and beat from (default: this one).")
    parser.add_argument("--modes", nargs="+", choices=["sync", "batch"],
                        default=["sync", "batch"])
    parser.add_argument("--repeat", type=int, default=1, help="Runs per tree, alternated.")
    args = parser.parse_args()
    sim, base_url = start_simulator(args.latency_ms, extra=[
        "--batch-turnaround-s", str(args.turnaround_s)])
    rows = []
    try:
        for _ in range(args.repeat):
            for mode in args.modes:
                for tree in args.trees:
                    sim_call(base_url, "POST", "/_sim/reset")
                    rows.append((f"{mode} {tree_label(tree)}",
                                 run(mode, args, base_url, tree=tree)))
    finally:
        sim.terminate()
        sim.wait()
        release_services()
    print(f"{args.jobs} rag_qa jobs; chat latency {args.latency_ms:g} ms, batch turnaround "
          f"{args.turnaround_s:g} s, worker concurrency {args.concurrency}, beat round "
          f"{args.poll_s:g} s, at most {args.batch_requests} requests per batch; "
          f"{os.cpu_count()} cores shared")
    print(f"{'mode, tree':24} {'verdicts':>8} {'worker CPU ms/v':>16} {'+ beat ms/v':>12} "
          f"{'judge HTTP/1k':>14} {'cost $':>10} {'last verdict s':>15} "
          f"{'batch lines':>12} {'repeated':>9}")
    for mode, row in rows:
        print(f"{mode:24} {row['verdicts']:>8.0f} {row['worker_ms']:>16.3f} "
              f"{row['cpu_ms']:>12.3f} {row['http_per_1k']:>14.1f} {row['cost']:>10.5f} "
              f"{row['elapsed_s']:>15.1f} {row['lines']:>12.0f} {row['repeated']:>9.0f}")


def run(mode: str, args: argparse.Namespace, base_url: str, *,
        tree: Path | None = None) -> dict[str, float]:
    settings = fresh_services(base_url).model_copy(update={
        "model_prices": {"judge-sim": PRICE}, "batch_poll_s": args.poll_s,
        "batch_max_wait_s": args.poll_s, "batch_max_requests": args.batch_requests,
        "batch_metrics": ["rag_qa"] if mode == "batch" else []})
    processes = [start_worker(settings, concurrency=args.concurrency, name=f"batch-{mode}",
                              tree=tree)]
    if mode == "batch":
        processes.append(start_beat(settings, tree=tree))
    try:
        wait_ready(processes)
        idle_cpu = [cpu_s(p.pid) for p in processes]  # start-up left out
        enqueue(settings, args.jobs)
        started = time.monotonic()
        while verdicts(settings)[0] < args.jobs:
            time.sleep(0.2)
            if any(p.poll() is not None for p in processes):
                raise RuntimeError("a process exited, see /tmp/evalfleet-bench-*.log")
            if time.monotonic() - started > 1800:
                raise RuntimeError("not done in 30 minutes")
        elapsed = time.monotonic() - started
        cpu = [cpu_s(p.pid) - idle for p, idle in zip(processes, idle_cpu, strict=True)]
    finally:
        for process in processes:
            process.terminate()
            process.wait()
    count, cost = verdicts(settings)
    stats = sim_call(base_url, "GET", "/_sim/stats")
    http = stats["requests"] + stats["batches"]["api_requests"]
    return {"verdicts": count, "cpu_ms": sum(cpu) * 1000 / count,
            "worker_ms": cpu[0] * 1000 / count, "http_per_1k": http * 1000 / count,
            "cost": cost, "elapsed_s": elapsed, "lines": stats["batches"]["lines_accepted"],
            "repeated": stats["batches"]["repeated_custom_ids"]}


def wait_ready(processes: list[subprocess.Popen[bytes]]) -> None:
    """Until every process has started and gone idle (its CPU time still for 0.5 s)."""
    deadline = time.monotonic() + 120
    before = [cpu_s(p.pid) for p in processes]
    while True:
        time.sleep(0.5)
        if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
            raise RuntimeError("a process did not start, see /tmp/evalfleet-bench-*.log")
        now = [cpu_s(p.pid) for p in processes]
        if all(a > 0 and b - a < 0.02 for a, b in zip(before, now, strict=True)):
            return
        before = now


def start_beat(settings: Settings, *, tree: Path | None = None) -> subprocess.Popen[bytes]:
    data_dir = Path(f"/tmp/evalfleet-bench-beat-{os.getpid()}")
    env = {**os.environ, **settings.model_copy(update={"data_dir": data_dir,
                                                       "metrics_port": 0}).as_environment()}
    if tree is not None:
        env["PYTHONPATH"] = str(tree.resolve())
    with BEAT_LOG.open("wb") as log:
        return subprocess.Popen([sys.executable, "-m", "evalfleet", "beat", "--loglevel",
                                 "INFO"], env=env, cwd=tree.resolve() if tree is not None else None,
                                stdout=log, stderr=subprocess.STDOUT)


def verdicts(settings: Settings) -> tuple[int, float]:
    url = settings.resolved_database_url().replace("+psycopg", "")
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*), coalesce(sum(cost_usd), 0) FROM verdicts").fetchone()
    assert row is not None
    return int(row[0]), float(row[1])


if __name__ == "__main__":
    main()
