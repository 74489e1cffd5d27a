"""Check verdicts against judged ones: verdicts/s and worker CPU per verdict, one run.

Setup: a fresh Postgres database and Redis database, the judge simulator in its own
process, one ``evalfleet worker`` process at a time (one core at most), messages of the
producers' default sizes (``EVALFLEET_BATCH_SIZE``, 16 jobs; a check metric's,
``EVALFLEET_CHECK_BATCH_SIZE``, 128, where the tree has it), samples with 2 KB outputs.
Three phases in one run, each draining jobs enqueued before its worker starts:

- ``check``: one built-in check per sample (a ``never_matches`` pattern over the output);
- ``judged``: rag_qa on the same samples, through the simulator at ``--latency-ms``;
- ``team``: one team check per sample (:func:`short_enough` below, by ``module:function``)
  in the worker's check process pool; its CPU counts the pool's processes too.

CPU is the worker process's (and its children's) user + system time over the steady part
of the drain, divided by the verdicts stored in it. The steady part starts when the
bench first sees a verdict stored and ends when it sees the last: the verdicts/s is the
verdicts stored after the start over the time between the newest ``created_at`` seen at
the start and the newest at the end (the worker's clock, as the verdicts were made, so a
slow poll adds nothing to it). The bench counts the verdicts (exactly, ``count(*)``) at a
cadence of half the time the drain's rate so far leaves, between 20 ms and 0.5 s, so its
own queries cost little while the end is still seen within a few tens of milliseconds.
Verdicts land in daily partitions as in production: after the migrations the bench drops
the fresh database's empty legacy partitions (which cover the first days after a
migration and carry two more indexes) and creates the daily ones (``ensure_partitions``,
as ``evalfleet beat`` does). ``--trees`` runs the workers from
other source trees too (a checkout of an older commit), phase by phase in turn, so
before and after share one machine state; each tree's jobs are published by that tree's
own code, in the messages its producers make, into a schema made by its own
migrations. The load average is printed before and after. ``--breakdown`` adds, per
drain, where the time went (:mod:`bench.drain_breakdown`).

    python -m bench.check_throughput --jobs 20000 --judged-jobs 2000 --team-jobs 2000
    python -m bench.check_throughput --trees /tmp/base . --phases check judged

With a tree given more than once (alternated runs), the ratios printed at the end are
those of the means of each tree's runs.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from statistics import mean

import psycopg
from celery import Celery

from bench.drain_breakdown import POLLER, Breakdown, report
from bench.worker_throughput import (
    DATABASE,
    POSTGRES_ADMIN,
    cpu_s,
    fresh_services,
    release_services,
    start_simulator,
    start_worker,
    tree_label,
)
from evalfleet.core.message import EVALUATE_TASK, Job, encode_batch, new_job
from evalfleet.core.metric import load_registry
from evalfleet.core.sample import Sample, parse_sample
from evalfleet.core.settings import Settings
from evalfleet.store import open_store
from evalfleet.store.partitions import (
    LEGACY_SUFFIX,
    PARTITIONED_TABLES,
    drop_partition,
    ensure_partitions,
    is_partitioned,
)

#: Characters of each sample's output.
OUTPUT_CHARS = 2048

CHECK_METRICS = {
    "bench_check": """\
name: bench_check
kind: check
checks:
  no_api_key: {check: never_matches, pattern: 'sk-[A-Za-z0-9_-]{20,}'}
""",
    "bench_team": """\
name: bench_team
kind: check
checks:
  short_enough: {check: team, function: "bench.check_throughput:short_enough"}
""",
}


def short_enough(sample: Sample) -> tuple[float, str]:
    """The team check the bench runs: the answer's share of a 4,000-character budget left."""
    used = min(len(sample.output), 4000)
    return 1 - used / 4000, f"{used} of 4000 characters"


#: The phases: label, metric, and the option giving its job count.
PHASES = {
    "check": ("check (1 built-in check a sample)", "bench_check", "jobs"),
    "judged": ("judged (rag_qa)", "rag_qa", "judged_jobs"),
    "team": ("team check (process pool)", "bench_team", "team_jobs"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20000, help="Built-in check jobs.")
    parser.add_argument("--judged-jobs", type=int, default=2000, help="rag_qa jobs.")
    parser.add_argument("--team-jobs", type=int, default=2000, help="Team check jobs.")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency-ms", type=float, default=100)
    parser.add_argument("--phases", nargs="+", choices=list(PHASES), default=list(PHASES))
    parser.add_argument("--trees", nargs="+", type=Path, default=[Path(".")],
                        help="Source trees to run the workers from (default: this one).")
    parser.add_argument("--breakdown", action="store_true",
                        help="Also print where each drain's time went (bench.drain_breakdown).")
    args = parser.parse_args()
    print(f"setup: {platform.machine()}, {os.cpu_count()} cores, python "
          f"{platform.python_version()}; one worker process, concurrency "
          f"{args.concurrency}, messages of each tree's producers' default size, "
          f"{OUTPUT_CHARS:,}-character outputs, "
          f"Postgres and Redis on this machine; judge simulator at {args.latency_ms:g} ms; "
          f"load average {load_average()}")
    sim, base_url = start_simulator(args.latency_ms)
    try:
        with tempfile.TemporaryDirectory() as folder:
            metrics_dir = Path(folder)
            for name, text in CHECK_METRICS.items():
                (metrics_dir / f"{name}.yaml").write_text(text)
            print(f"{'tree':<12} {'phase':<36} {'verdicts':>9} {'verdicts/s':>11} "
                  f"{'CPU ms/verdict':>15}")
            results: dict[tuple[str, str], list[float]] = defaultdict(list)
            for phase in args.phases:
                label, metric, jobs_option = PHASES[phase]
                jobs = getattr(args, jobs_option)
                for tree in args.trees:
                    settings = fresh_services(base_url, tree=tree).model_copy(
                        update={"metrics_dir": metrics_dir})
                    daily_partitions(settings.resolved_database_url())
                    breakdown: list[str] = []
                    rate, cpu_ms = drain(settings, metric=metric, jobs=jobs,
                                         concurrency=args.concurrency, tree=tree,
                                         breakdown=breakdown if args.breakdown else None)
                    results[tree_label(tree), phase].append(cpu_ms)
                    print(f"{tree_label(tree):<12} {label:<36} {jobs:>9,} {rate:>11,.0f} "
                          f"{cpu_ms:>15.3f}", flush=True)
                    if breakdown:
                        print("\n".join(breakdown), flush=True)
            for label in dict.fromkeys(tree_label(tree) for tree in args.trees):
                print_ratios(label, results)
    finally:
        sim.terminate()
        sim.wait()
        release_services()
    print(f"load average after: {load_average()}")


def print_ratios(tree: str, results: dict[tuple[str, str], list[float]]) -> None:
    """Each check phase's CPU per verdict against the judged phase's, for ``tree``: the
    ratio of the means of the tree's runs of each phase."""
    if not results.get((tree, "judged")):
        return
    judged = mean(results[tree, "judged"])
    shares = [f"{PHASES[phase][0].split(' (')[0]} {mean(results[tree, phase]) / judged:.1%}"
              for phase in ("check", "team") if results.get((tree, phase))]
    if shares:
        runs = len(results[tree, "judged"])
        print(f"{tree}: worker CPU per verdict against a judged verdict's (ratio of the "
              f"means of {runs} run{'s' if runs > 1 else ''} each): {', '.join(shares)}")


def daily_partitions(url: str) -> None:
    """Make the fresh bench database's verdicts land in daily partitions, as a store's
    do once its first days after the migration are past: drop the (empty) legacy
    partitions and create the daily ones from today (a no-op on an unpartitioned schema)."""
    store = open_store(url)
    try:
        with store.engine.begin() as conn:
            if not is_partitioned(conn):
                return
            for table in PARTITIONED_TABLES:
                legacy = f"{table}_{LEGACY_SUFFIX}"
                if conn.exec_driver_sql(f"SELECT to_regclass('{legacy}')").scalar_one() and \
                        conn.exec_driver_sql(f"SELECT EXISTS (SELECT FROM {legacy})").scalar_one():
                    raise RuntimeError(f"{legacy} holds rows: not a fresh bench database")
            drop_partition(conn, LEGACY_SUFFIX)
            ensure_partitions(conn, now=datetime.now(UTC))
    finally:
        store.close()


def load_average() -> str:
    """The machine's 1, 5 and 15 minute load averages (the machine is shared)."""
    return ", ".join(f"{load:.2f}" for load in os.getloadavg())


#: Bounds of the wait between two counts of the stored verdicts during a drain (seconds).
POLL_MIN_S, POLL_MAX_S = 0.02, 0.5

#: Longest a drain may go without a verdict stored before the bench gives up (seconds).
STALL_S = 120.0


def drain(settings: Settings, *, metric: str, jobs: int, concurrency: int,
          tree: Path, breakdown: list[str] | None = None) -> tuple[float, float]:
    """Enqueue ``jobs`` of ``metric``, drain them with one worker run from ``tree``;
    (verdicts/s, CPU ms per verdict) over the steady part (from the first verdicts seen
    stored; the module's docstring says how it is timed).
    ``breakdown``, when given, gets the lines of :func:`bench.drain_breakdown.report`."""
    publish(settings, metric=metric, jobs=jobs, tree=tree)
    url = settings.resolved_database_url().replace("+psycopg", "")
    poller = psycopg.connect(url, autocommit=True, application_name=POLLER)
    if breakdown is not None:
        Breakdown.enable(POSTGRES_ADMIN, DATABASE)
    worker = start_worker(settings, concurrency=concurrency, name=f"checks-{metric}",
                          queue=metric, tree=tree)
    probe = (Breakdown(POSTGRES_ADMIN, url, DATABASE, worker.pid)
             if breakdown is not None else None)

    def stored() -> int:
        row = poller.execute("SELECT count(*) FROM verdicts").fetchone()
        return int(row[0]) if row else 0

    def any_stored() -> bool:
        row = poller.execute("SELECT EXISTS (SELECT FROM verdicts)").fetchone()
        return bool(row and row[0])

    def newest() -> datetime:
        row = poller.execute("SELECT max(created_at) FROM verdicts").fetchone()
        assert row is not None and row[0] is not None
        return row[0]

    def check_alive(since: float) -> None:
        if worker.poll() is not None:
            raise RuntimeError(f"the worker exited, see /tmp/evalfleet-bench-worker-"
                               f"checks-{metric}.log")
        if time.monotonic() - since > STALL_S:
            raise RuntimeError(f"no verdict stored for {STALL_S:g} s")

    try:
        waiting = time.monotonic()
        while not any_stored():
            check_alive(waiting)
            time.sleep(0.01)
        cpu_start = tree_cpu_s(worker.pid)
        started, done_start, first_at = time.monotonic(), stored(), newest()
        first = probe.snapshot(done_start) if probe is not None else None
        done, progressed = done_start, started
        while done < jobs:
            rate = (done - done_start) / max(time.monotonic() - started, 1e-3)
            left = (jobs - done) / rate if rate else POLL_MAX_S
            time.sleep(min(POLL_MAX_S, max(POLL_MIN_S, left / 2)))
            if (now := stored()) > done:
                done, progressed = now, time.monotonic()
            check_alive(progressed)
        cpu_used = tree_cpu_s(worker.pid) - cpu_start
        elapsed = (newest() - first_at).total_seconds()
        if probe is not None and first is not None and breakdown is not None:
            breakdown.extend(report(first, probe.snapshot(done)))
    finally:
        worker.terminate()
        worker.wait()
        poller.close()
        if probe is not None:
            probe.close()
    measured = jobs - done_start
    if measured <= 0 or elapsed <= 0:
        raise RuntimeError(f"the {jobs:,} jobs were stored before the bench could time them:"
                           " give more jobs")
    return measured / elapsed, cpu_used * 1000 / measured


#: What a child process from a tree runs to publish that tree's way (its ``enqueue``).
PUBLISH = ("import sys; from bench.check_throughput import bench_output_sample, enqueue; "
           "from evalfleet.core.settings import Settings; enqueue(Settings(), "
           "metric=sys.argv[1], jobs=int(sys.argv[2]), sample=bench_output_sample)")


def publish(settings: Settings, *, metric: str, jobs: int, tree: Path) -> None:
    """:func:`enqueue` as ``tree`` has it, in a child process running from ``tree``."""
    env = {**os.environ, **settings.as_environment(), "PYTHONPATH": str(tree.resolve())}
    subprocess.run([sys.executable, "-c", PUBLISH, metric, str(jobs)], env=env,
                   cwd=tree.resolve(), check=True)


def enqueue(settings: Settings, *, metric: str, jobs: int,
            sample: Callable[[int], Sample]) -> None:
    """Publish ``jobs`` jobs of ``metric`` as the producers do, in messages of the
    settings' size for its kind (a check metric's messages carry more jobs)."""
    kind = load_registry(settings.judge.metrics_dir).get(metric).spec.kind
    size = settings.broker.jobs_per_message(check=kind == "check")
    app = Celery("bench-producer", broker=settings.resolved_broker_url(), set_as_current=False)
    batch: list[Job] = []
    with app.producer_or_acquire() as producer:
        for n in range(jobs):
            batch.append(new_job(metric, sample(n)))
            if len(batch) == size or n == jobs - 1:
                app.send_task(EVALUATE_TASK, args=[encode_batch(batch)],
                              queue=f"eval.{metric}", producer=producer)
                batch = []
    app.close()


def bench_output_sample(n: int) -> Sample:
    """The ``n``-th sample: a rag_qa question with a 2 KB answer."""
    answer = f"You have 30 days from delivery to return order {n}. "
    return parse_sample({
        "id": f"bench-{n}", "input": f"How long is the return window for order {n}?",
        "output": (answer * (OUTPUT_CHARS // len(answer) + 1))[:OUTPUT_CHARS],
        "context": ["Returns: 30 days from delivery."], "reference": "30 days",
        "attributes": {"app": "bench", "route": "/chat"},
    })


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and its living descendants (the team check processes)."""
    total, stack = 0.0, [pid]
    while stack:
        current = stack.pop()
        try:
            total += cpu_s(current)
            for task in Path(f"/proc/{current}/task").iterdir():
                stack.extend(int(child) for child in (task / "children").read_text().split())
        except FileNotFoundError:  # ended meanwhile
            continue
    return total


if __name__ == "__main__":
    main()
