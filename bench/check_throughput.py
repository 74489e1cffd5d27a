"""Check verdicts against judged ones: verdicts/s and worker CPU per verdict, one run.

Setup: a fresh Postgres database and Redis database, the judge simulator in its own
process, one ``evalfleet worker`` process at a time (one core at most), messages of the
producers' default sizes (``EVALFLEET_BATCH_SIZE``, 16 jobs; a check metric's,
``EVALFLEET_CHECK_BATCH_SIZE``, 64, where the tree has it), samples with 2 KB outputs.
Three phases in one run, each draining jobs enqueued before its worker starts:

- ``check``: one built-in check per sample (a ``never_matches`` pattern over the output);
- ``judged``: rag_qa on the same samples, through the simulator at ``--latency-ms``;
- ``team``: one team check per sample (:func:`short_enough` below, by ``module:function``)
  in the worker's check process pool; its CPU counts the pool's processes too.

CPU is the worker process's (and its children's) user + system time over the steady part
of the drain, divided by the verdicts stored in it. ``--trees`` runs the workers from
other source trees too (a checkout of an older commit), phase by phase in turn, so
before and after share one machine state; each tree's jobs are published by that tree's
own code, in the messages its producers make, into a schema made by its own
migrations. The load average is printed before and after. ``--breakdown`` adds, per
drain, where the time went (:mod:`bench.drain_breakdown`).

    python -m bench.check_throughput --jobs 20000 --judged-jobs 2000 --team-jobs 2000
    python -m bench.check_throughput --trees /tmp/base . --phases check judged
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

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
            results: dict[tuple[str, str], float] = {}
            for phase in args.phases:
                label, metric, jobs_option = PHASES[phase]
                jobs = getattr(args, jobs_option)
                for tree in args.trees:
                    settings = fresh_services(base_url, tree=tree).model_copy(
                        update={"metrics_dir": metrics_dir})
                    breakdown: list[str] = []
                    rate, cpu_ms = drain(settings, metric=metric, jobs=jobs,
                                         concurrency=args.concurrency, tree=tree,
                                         breakdown=breakdown if args.breakdown else None)
                    results[tree_label(tree), phase] = cpu_ms
                    print(f"{tree_label(tree):<12} {label:<36} {jobs:>9,} {rate:>11,.0f} "
                          f"{cpu_ms:>15.3f}", flush=True)
                    if breakdown:
                        print("\n".join(breakdown), flush=True)
            for tree in args.trees:
                print_ratios(tree_label(tree), results)
    finally:
        sim.terminate()
        sim.wait()
        release_services()
    print(f"load average after: {load_average()}")


def print_ratios(tree: str, results: dict[tuple[str, str], float]) -> None:
    """Each check phase's CPU per verdict against the judged phase's, for ``tree``."""
    judged = results.get((tree, "judged"))
    if judged is None:
        return
    shares = [f"{PHASES[phase][0].split(' (')[0]} {results[tree, phase] / judged:.1%}"
              for phase in ("check", "team") if (tree, phase) in results]
    if shares:
        print(f"{tree}: worker CPU per verdict against a judged verdict's: "
              f"{', '.join(shares)}")


def load_average() -> str:
    """The machine's 1, 5 and 15 minute load averages (the machine is shared)."""
    return ", ".join(f"{load:.2f}" for load in os.getloadavg())


def drain(settings: Settings, *, metric: str, jobs: int, concurrency: int,
          tree: Path, breakdown: list[str] | None = None) -> tuple[float, float]:
    """Enqueue ``jobs`` of ``metric``, drain them with one worker run from ``tree``;
    (verdicts/s, CPU ms per verdict) over the steady part (from the first verdict stored).
    ``breakdown``, when given, gets the lines of :func:`bench.drain_breakdown.report`."""
    publish(settings, metric=metric, jobs=jobs, tree=tree)
    url = settings.resolved_database_url()
    store = open_store(f"{url}?application_name={POLLER}")
    if breakdown is not None:
        Breakdown.enable(POSTGRES_ADMIN, DATABASE)
    worker = start_worker(settings, concurrency=concurrency, name=f"checks-{metric}",
                          queue=metric, tree=tree)
    probe = (Breakdown(POSTGRES_ADMIN, url.replace("+psycopg", ""), DATABASE, worker.pid)
             if breakdown is not None else None)
    try:
        while store.counts().verdicts == 0:
            if worker.poll() is not None:
                raise RuntimeError(f"the worker exited, see /tmp/evalfleet-bench-worker-"
                                   f"checks-{metric}.log")
            time.sleep(0.01)
        started, done_start = time.monotonic(), store.counts().verdicts
        cpu_start = tree_cpu_s(worker.pid)
        first = probe.snapshot(done_start) if probe is not None else None
        while (done := store.counts().verdicts) < jobs:
            time.sleep(0.05)
            if worker.poll() is not None:
                raise RuntimeError("the worker exited")
        cpu_used = tree_cpu_s(worker.pid) - cpu_start
        elapsed = time.monotonic() - started
        if probe is not None and first is not None and breakdown is not None:
            breakdown.extend(report(first, probe.snapshot(done)))
    finally:
        worker.terminate()
        worker.wait()
        store.close()
        if probe is not None:
            probe.close()
    measured = jobs - done_start
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
