"""Worker processes against the judge simulator: verdicts/s, CPU per verdict, peak RSS.

Setup: a fresh Postgres database, a Redis database, the simulator in its own
process at a fixed latency, N rag_qa jobs enqueued (in batch messages, as the
producers send them) before the workers start, then ``--workers`` ``evalfleet
worker`` processes per concurrency level. Throughput is compared with the
ceiling workers x C / L (concurrency over judge latency), and with the latency the
workers measured per call ("L seen": the simulator's latency plus any queueing on a
busy machine, on either side); "machine busy" is the share of all cores in use during
the run, by every process (Postgres, Redis and the simulator included).

    python -m bench.worker_throughput --jobs 3000 --latency-ms 500 --concurrency 64 256 1024
    python -m bench.worker_throughput --jobs 20000 --latency-ms 500 --concurrency 512 --workers 2
    python -m bench.worker_throughput --concurrency 256 --redis-consume atomic kombu
    python -m bench.worker_throughput --trees /tmp/base . --concurrency 64 256 1024
    python -m bench.worker_throughput --trees /tmp/base . --queue-sets rag_qa \
        bbh_match,rag_qa rag_qa,bbh_match --jobs 1600

    python -m bench.worker_throughput --trees /tmp/base . --concurrency 256 --sigkill

``--trees`` runs the workers from other source trees (a checkout of an older commit)
in the same run, so before and after share one machine state. ``--queue-sets`` times
draining the rag_qa jobs with a worker on each set of queues instead (the other
queues empty): a worker on several queues should be as fast as one on rag_qa alone.
"saves/msg" counts the transactions that stored verdicts per message: a worker stores
the answers of a batch as they arrive, those that arrive together in one transaction
(before: one per message, at the end of its batch).

``--sigkill`` SIGKILLs the worker once a quarter of the jobs have verdicts, restarts
it and drains, and prints the judge calls made beyond one per job against the calls
in flight at the kill: a call is in flight from request sent until its verdict is
durable (requests the simulator got from the killed worker minus verdicts stored).
"open at kill" is the part of those the judge had not answered yet (the simulator's
open requests just before the kill); the rest were answered and not yet stored: a
worker that saves at the end of each batch holds every answered verdict of its
batches, one that saves as answers arrive only those of its last ~20 ms (more when
the machine is too busy to take them at once).

Needs Postgres and Redis on 127.0.0.1 (as the tests do); it uses a database of its
own and a Redis database no test session holds. Prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
import redis
from celery import Celery

from evalfleet.core.message import EVALUATE_TASK, Job, encode_batch, new_job
from evalfleet.core.sample import Sample, parse_sample
from evalfleet.core.settings import Settings
from evalfleet.store import migrate, open_store

POSTGRES_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
DATABASE = f"evalfleet_bench_{os.getpid()}"
REDIS_SERVER = "redis://127.0.0.1:6379"
#: The key test sessions hold on the Redis database they use (tests/conftest.py).
REDIS_LOCK = "evalfleet-test-session"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_redis_url: list[str] = []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--latency-ms", type=float, default=500)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--batch-size", type=int, default=16, help="Jobs per message.")
    parser.add_argument("--judge-client", choices=["http", "openai"], default="http")
    parser.add_argument("--workers", type=int, default=1, help="Worker processes.")
    parser.add_argument("--redis-consume", nargs="+", choices=["atomic", "kombu"],
                        default=["atomic"],
                        help="Redis consume: the atomic pop (default) and/or kombu's BRPOP.")
    parser.add_argument("--trees", nargs="+", type=Path, default=[Path(".")],
                        help="Source trees to run the workers from (default: this one).")
    parser.add_argument("--queue-sets", nargs="+", default=None, metavar="QUEUES",
                        help="Time the drain with a worker on each comma-separated set.")
    parser.add_argument("--drain-timeout-s", type=float, default=120.0)
    parser.add_argument("--sigkill", action="store_true",
                        help="Kill the worker mid-run instead: extra judge calls.")
    args = parser.parse_args()
    try:
        if args.queue_sets:
            drain_table(args)
        elif args.sigkill:
            sigkill_table(args)
        else:
            throughput_table(args)
    finally:
        release_services()


def throughput_table(args: argparse.Namespace) -> None:
    """Verdicts/s, CPU per verdict and saves per message per tree and concurrency."""

    sim, base_url = start_simulator(args.latency_ms)
    print(f"setup: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"python {platform.python_version()}, judge client {args.judge_client}, "
          f"{args.jobs} rag_qa jobs in messages of {args.batch_size}, "
          f"judge latency {args.latency_ms:g} ms (simulator in its own process), "
          f"{args.workers} worker process(es) from {', '.join(map(tree_label, args.trees))}, "
          "Postgres and Redis on this machine")
    print(f"{'tree':>12} {'consume':>8} {'C':>6} {'verdicts/s':>11} {'C/L':>8} {'of C/L':>7} "
          f"{'CPU ms/verdict':>15} {'peak RSS MB':>12} {'machine busy':>13} "
          f"{'L seen ms':>10} {'of C/L seen':>12} {'saves/msg':>10}")
    try:
        for concurrency in args.concurrency:
            for tree in args.trees:
                for consume in args.redis_consume:
                    row = run_one(concurrency=concurrency, jobs=args.jobs, base_url=base_url,
                                  batch_size=args.batch_size, judge_client=args.judge_client,
                                  workers=args.workers, atomic_consume=consume == "atomic",
                                  tree=tree)
                    ceiling = args.workers * concurrency / (args.latency_ms / 1000)
                    print(f"{tree_label(tree):>12} {consume:>8} {concurrency:>6} "
                          f"{row['rate']:>11.1f} {ceiling:>8.1f} {row['rate'] / ceiling:>7.0%} "
                          f"{row['cpu_ms']:>15.2f} {row['rss_mb']:>12.0f} "
                          f"{row['busy']:>13.0%} {row['latency_ms']:>10.0f} "
                          f"{row['rate'] / (ceiling * args.latency_ms / row['latency_ms']):>12.0%} "
                          f"{row['saves'] * args.batch_size / args.jobs:>10.2f}", flush=True)
    finally:
        sim.terminate()
        sim.wait()


def drain_table(args: argparse.Namespace) -> None:
    """Time draining ``args.jobs`` rag_qa jobs with one worker on each queue set."""
    sim, base_url = start_simulator(args.latency_ms)
    print(f"setup: {platform.machine()}, {os.cpu_count()} cores, {args.jobs} rag_qa jobs in "
          f"messages of {args.batch_size}, judge latency {args.latency_ms:g} ms, one worker "
          f"at C={args.concurrency[0]} per queue set (its other queues empty), Postgres and "
          "Redis on this machine")
    print(f"{'tree':>12} {'queues':>22} {'drain s':>8} {'verdicts':>9}")
    try:
        for queues in args.queue_sets:
            for tree in args.trees:
                seconds, done = drain_once(queues=queues, jobs=args.jobs, base_url=base_url,
                                           batch_size=args.batch_size, tree=tree,
                                           concurrency=args.concurrency[0],
                                           timeout_s=args.drain_timeout_s)
                shown = f"{seconds:.1f}" if done == args.jobs else f">{seconds:.0f}"
                print(f"{tree_label(tree):>12} {queues:>22} {shown:>8} {done:>9}", flush=True)
    finally:
        sim.terminate()
        sim.wait()


def drain_once(*, queues: str, jobs: int, base_url: str, batch_size: int, tree: Path,
               concurrency: int, timeout_s: float) -> tuple[float, int]:
    """Seconds from a worker's start until ``jobs`` verdicts (or the timeout), and how many."""
    settings = fresh_services(base_url).model_copy(update={"batch_size": batch_size})
    enqueue(settings, jobs)
    store = open_store(settings.resolved_database_url())
    worker = start_worker(settings, concurrency=concurrency, name=f"drain-{tree_label(tree)}",
                          queue=queues, tree=tree)
    try:
        started = time.monotonic()
        done = 0
        while done < jobs and time.monotonic() - started < timeout_s:
            time.sleep(0.1)
            done = store.counts().verdicts
        return time.monotonic() - started, done
    finally:
        worker.terminate()
        worker.wait()
        store.close()


def tree_label(tree: Path) -> str:
    """A short name for a source tree in a table."""
    return "this tree" if tree.resolve() == Path.cwd().resolve() else tree.resolve().name


def start_simulator(latency_ms: float, *,
                    extra: list[str] | None = None) -> tuple[subprocess.Popen[str], str]:
    """The judge simulator in its own process; returns it and its base URL."""
    sim = subprocess.Popen(
        [sys.executable, "-m", "evalfleet", "judge-sim", "--port", "0",
         "--latency-ms", str(latency_ms), *(extra or [])], stderr=subprocess.PIPE, text=True)
    assert sim.stderr is not None
    for line in sim.stderr:
        match = re.search(r"listening on (\S+)", line)
        if match:
            # Keep reading, so a chatty simulator never blocks on a full pipe.
            threading.Thread(target=sim.stderr.read, daemon=True).start()
            return sim, match.group(1)
    raise RuntimeError("the simulator did not start")


def run_one(*, concurrency: int, jobs: int, base_url: str, batch_size: int,
            judge_client: str, workers: int = 1, atomic_consume: bool = True,
            tree: Path | None = None) -> dict[str, float]:
    """Drain ``jobs`` with ``workers`` worker processes; rates over the steady part."""
    settings = fresh_services(base_url).model_copy(
        update={"batch_size": batch_size, "judge_client": judge_client,
                "redis_atomic_consume": atomic_consume})
    enqueue(settings, jobs)
    store = open_store(settings.resolved_database_url())
    processes = [start_worker(settings, concurrency=concurrency, name=f"{concurrency}-{n}",
                              tree=tree) for n in range(workers)]
    try:
        while store.counts().verdicts == 0:
            time.sleep(0.01)
        started, done_start = time.monotonic(), store.counts().verdicts
        cpu_start, machine_start = sum(cpu_s(p.pid) for p in processes), machine_jiffies()
        while store.counts().verdicts < jobs:
            time.sleep(0.05)
            if any(p.poll() is not None for p in processes):
                raise RuntimeError("a worker exited, see /tmp/evalfleet-bench-worker-*.log")
        elapsed = time.monotonic() - started
        measured = jobs - done_start
        busy, total = (b - a for a, b in zip(machine_start, machine_jiffies(), strict=True))
        row = {"rate": measured / elapsed, "latency_ms": mean_latency_ms(settings),
               "cpu_ms": (sum(cpu_s(p.pid) for p in processes) - cpu_start) * 1000 / measured,
               "rss_mb": max(peak_rss_mb(p.pid) for p in processes),
               "busy": busy / total if total else 0.0}
    finally:
        for process in processes:
            process.terminate()
            process.wait()
        store.close()
    return {**row, "saves": save_transactions(settings)}


def sigkill_table(args: argparse.Namespace) -> None:
    """Per tree: SIGKILL one worker mid-run, restart it, and count the extra judge calls."""
    # Latency spread around L, so a batch's answers arrive over time as a real judge's do.
    low, high = args.latency_ms / 2, args.latency_ms * 3 / 2
    sim, base_url = start_simulator(args.latency_ms, extra=[
        "--latency", "uniform", "--latency-min-ms", str(low), "--latency-max-ms", str(high)])
    concurrency = args.concurrency[0]
    print(f"setup: {platform.machine()}, {os.cpu_count()} cores, {args.jobs} rag_qa jobs in "
          f"messages of {args.batch_size}, judge latency uniform {low:g} to {high:g} ms, "
          "one worker "
          f"at C={concurrency}, SIGKILLed once {args.jobs // 4} verdicts are stored, then "
          "restarted (visibility timeout 15 s) and drained")
    print(f"{'tree':>12} {'C':>6} {'verdicts at kill':>17} {'open at kill':>13} "
          f"{'in flight at kill':>18} {'extra calls':>12} {'verdicts':>9} {'duplicates':>11}")
    try:
        for tree in args.trees:
            row = sigkill_once(concurrency=concurrency, jobs=args.jobs, base_url=base_url,
                               batch_size=args.batch_size, tree=tree,
                               timeout_s=args.drain_timeout_s)
            print(f"{tree_label(tree):>12} {concurrency:>6} {row['at_kill']:>17} "
                  f"{row['open']:>13} {row['in_flight']:>18} {row['extra']:>12} "
                  f"{row['verdicts']:>9} "
                  f"{row['duplicates']:>11}", flush=True)
    finally:
        sim.terminate()
        sim.wait()


def sigkill_once(*, concurrency: int, jobs: int, base_url: str, batch_size: int, tree: Path,
                 timeout_s: float) -> dict[str, int]:
    """Kill a worker a quarter of the way through ``jobs``, restart it, drain."""
    settings = fresh_services(base_url).model_copy(update={
        "batch_size": batch_size, "judge_timeout_s": 5, "retry_max_s": 2,
        "visibility_timeout_s": 15})
    sim_call(base_url, "POST", "/_sim/reset")
    enqueue(settings, jobs)
    store = open_store(settings.resolved_database_url())
    label = tree_label(tree).replace(" ", "-")
    worker = start_worker(settings, concurrency=concurrency, name=f"kill-{label}", tree=tree)
    try:
        while store.counts().verdicts < jobs // 4:
            time.sleep(0.01)
        open_at_kill = int(sim_call(base_url, "GET", "/_sim/stats")["in_flight"])
        worker.kill()
        worker.wait()
        at_kill = store.counts().verdicts
        sent = int(sim_call(base_url, "GET", "/_sim/stats")["requests"])
        worker = start_worker(settings, concurrency=concurrency, name=f"restart-{label}",
                              tree=tree)
        started = time.monotonic()
        while store.counts().verdicts < jobs and time.monotonic() - started < timeout_s:
            time.sleep(0.1)
        requests = int(sim_call(base_url, "GET", "/_sim/stats")["requests"])
        return {"at_kill": at_kill, "open": open_at_kill, "in_flight": sent - at_kill,
                "extra": requests - jobs,
                "verdicts": store.counts().verdicts, "duplicates": duplicate_keys(settings)}
    finally:
        worker.terminate()
        worker.wait()
        store.close()


def sim_call(base_url: str, method: str, path: str) -> Any:
    """One call to the simulator's control API (``/_sim/...``)."""
    root = base_url.rsplit("/v1", 1)[0]
    request = urllib.request.Request(root + path, method=method, data=b"" if method == "POST"
                                     else None)
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"null")


def start_worker(settings: Settings, *, concurrency: int, name: str,
                 queue: str = "rag_qa", tree: Path | None = None) -> subprocess.Popen[bytes]:
    """One ``evalfleet worker`` process, its output in /tmp/evalfleet-bench-worker-NAME.log.

    Args:
        settings: Its settings (as environment variables).
        concurrency: Its ``--concurrency``.
        name: Names its log.
        queue: Its ``--queues`` (comma-separated metrics).
        tree: The source tree it runs from (default: the one this script runs from).
    """
    log_path = Path(f"/tmp/evalfleet-bench-worker-{name}.log")
    env = {**os.environ, **settings.as_environment()}
    if tree is not None:
        env["PYTHONPATH"] = str(tree.resolve())
    with log_path.open("wb") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "evalfleet", "worker", "--queues", queue,
             "--concurrency", str(concurrency), "--loglevel", "WARNING"],
            env=env, cwd=tree.resolve() if tree is not None else None, stdout=log,
            stderr=subprocess.STDOUT)


def mean_latency_ms(settings: Settings) -> float:
    """The mean judge call time the workers recorded in their verdicts."""
    url = settings.resolved_database_url().replace("+psycopg", "")
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT avg(latency_ms) FROM verdicts").fetchone()
    return float(row[0]) if row and row[0] is not None else float("nan")


def save_transactions(settings: Settings) -> int:
    """Transactions that stored verdicts (the distinct inserting transaction ids)."""
    url = settings.resolved_database_url().replace("+psycopg", "")
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(DISTINCT xmin::text) FROM verdicts").fetchone()
    return int(row[0]) if row else 0


def duplicate_keys(settings: Settings) -> int:
    """Verdict keys stored more than once (there must be none)."""
    url = settings.resolved_database_url().replace("+psycopg", "")
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM (SELECT 1 FROM verdicts GROUP BY sample_id, "
                           "metric, prompt_version, judge_model HAVING count(*) > 1) AS twice"
                           ).fetchone()
    return int(row[0]) if row else 0


def machine_jiffies() -> tuple[int, int]:
    """(busy, total) CPU time of the whole machine so far, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def redis_url() -> str:
    """A Redis database (1-15) no test session or other bench holds, taken for this run
    the way test sessions take theirs."""
    if not _redis_url:
        for db in range(15, 0, -1):
            client = redis.Redis.from_url(f"{REDIS_SERVER}/{db}")
            if client.set(REDIS_LOCK, f"bench-{os.getpid()}", nx=True, ex=6 * 3600):
                _redis_url.append(f"{REDIS_SERVER}/{db}")
                break
        else:
            raise RuntimeError("every Redis database 1-15 is taken")
    return _redis_url[0]


def release_services() -> None:
    """Drop the bench database and give back the Redis database."""
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
    if _redis_url:
        redis.Redis.from_url(_redis_url.pop()).flushdb()


def fresh_services(base_url: str, *, tree: Path | None = None) -> Settings:
    """A fresh bench database and Redis database; the schema made by ``tree``'s own
    migrations when given (a worker from an older tree meets the schema it knows)."""
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {DATABASE}")
    client = redis.Redis.from_url(redis_url())
    lock = client.get(REDIS_LOCK)
    client.flushdb()
    client.set(REDIS_LOCK, lock or b"", ex=6 * 3600)
    settings = Settings(
        database_url=f"postgresql+psycopg://postgres@127.0.0.1:5432/{DATABASE}",
        broker_url=redis_url(), openai_base_url=base_url, judge_model="judge-sim",
        judge_timeout_s=30, retry_max_s=60, visibility_timeout_s=900,
    )
    if tree is not None:
        subprocess.run([sys.executable, "-c", MIGRATE, settings.resolved_database_url()],
                       env={**os.environ, "PYTHONPATH": str(tree.resolve())},
                       cwd=tree.resolve(), check=True)
        return settings
    store = open_store(settings.resolved_database_url())
    migrate(store.engine)
    store.close()
    return settings


#: What a child process from a tree runs to make the schema that tree's way.
MIGRATE = ("import sys; from evalfleet.store import migrate, open_store; "
           "store = open_store(sys.argv[1]); migrate(store.engine); store.close()")


def enqueue(settings: Settings, jobs: int) -> None:
    """Publish the jobs as the producers do: batches of ``batch_size`` per message."""
    app = Celery("bench-producer", broker=settings.resolved_broker_url(), set_as_current=False)
    batch: list[Job] = []
    with app.producer_or_acquire() as producer:
        for n in range(jobs):
            batch.append(new_job("rag_qa", bench_sample(n)))
            if len(batch) == settings.broker.batch_size or n == jobs - 1:
                app.send_task(EVALUATE_TASK, args=[encode_batch(batch)], queue="eval.rag_qa",
                              producer=producer)
                batch = []
    app.close()


def bench_sample(n: int) -> Sample:
    """The ``n``-th rag_qa sample the benchmarks judge."""
    return parse_sample({
        "id": f"bench-{n}", "input": f"How long is the return window for order {n}?",
        "output": "30 days from delivery.", "context": ["Returns: 30 days from delivery."],
        "reference": "30 days", "attributes": {"app": "bench", "route": "/chat"},
    })


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
