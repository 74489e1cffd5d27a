"""A fleet-wide rate limit from a cold start: the busiest 10 s window against the limit.

Setup: the judge simulator in its own process enforcing the provider's limit
(``--rpm``: over it in its sliding minute it answers 429), ``--workers`` ``evalfleet
worker`` processes started at once on a backlog, sharing one budget of ``--rpm``
through Redis, for each judge client and source tree asked for. The simulator counts
arrivals per 100 ms; a window's share is its requests against the limit's 10 s worth.
"busiest" is the most requests in any 10 s window of the run, "first 10 s" the window
that starts with the first request (the start-up burst), "steady" the rate after that
window until 2 s before the last request (as the backlog runs out), against the limit.

    python -m bench.rate_limit --rpm 1200 --seconds 30 --workers 2 4 \\
        --judge-client http openai --trees /tmp/base .
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import httpx

from bench.worker_throughput import (
    enqueue,
    fresh_services,
    start_simulator,
    start_worker,
    tree_label,
)
from evalfleet.store import open_store

#: The window the peak is measured over, in 100 ms ticks.
WINDOW_TICKS = 100

#: The end of a run left out of the steady rate, in 100 ms ticks.
TAIL_TICKS = 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rpm", type=float, default=1200)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--workers", type=int, nargs="+", default=[2])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency-ms", type=float, default=200)
    parser.add_argument("--judge-client", nargs="+", choices=["http", "openai"],
                        default=["http"])
    parser.add_argument("--trees", nargs="+", type=Path, default=[Path(".")],
                        help="Source trees to run the workers from (default: this one).")
    args = parser.parse_args()
    jobs = int(args.rpm / 60 * args.seconds)
    print(f"setup: {platform.machine()}, {os.cpu_count()} cores, workers x C={args.concurrency} "
          f"started at once on {jobs} rag_qa jobs, sharing judge_rpm={args.rpm:g} through "
          f"Redis; simulator at {args.latency_ms:g} ms answering 429 over {args.rpm:g} "
          "requests in any 60 s")
    print(f"{'tree':>12} {'client':>7} {'workers':>7} {'busiest 10 s':>13} {'first 10 s':>11} "
          f"{'steady':>7} {'429s':>5} {'wall s':>7}")
    for workers in args.workers:
        for client in args.judge_client:
            for tree in args.trees:
                row = run_one(args, jobs=jobs, workers=workers, client=client, tree=tree)
                print(f"{tree_label(tree):>12} {client:>7} {workers:>7} {row['busiest']:>13.1%} "
                      f"{row['first']:>11.1%} {row['steady']:>7.1%} {row['429']:>5.0f} "
                      f"{row['wall_s']:>7.1f}", flush=True)


def run_one(args: argparse.Namespace, *, jobs: int, workers: int, client: str,
            tree: Path) -> dict[str, float]:
    """One cold start; the windows' shares of the limit."""
    sim, base_url = start_simulator(args.latency_ms, extra=["--rpm-limit", str(int(args.rpm))])
    settings = fresh_services(base_url).model_copy(
        update={"judge_rpm": args.rpm, "judge_client": client})
    enqueue(settings, jobs)
    store = open_store(settings.resolved_database_url())
    processes = [start_worker(settings, concurrency=args.concurrency, name=f"rate-{n}",
                              tree=tree) for n in range(workers)]
    try:
        started = time.monotonic()
        while store.counts().verdicts < jobs and time.monotonic() - started < 4 * args.seconds:
            time.sleep(0.2)
        wall_s = time.monotonic() - started
        stats = httpx.get(base_url.rsplit("/v1", 1)[0] + "/_sim/stats").json()
    finally:
        for process in processes:
            process.terminate()
            process.wait()
        store.close()
        sim.terminate()
        sim.wait()
    arrivals = {int(tick): n for tick, n in stats["arrivals_per_100ms"].items()}
    first, last = min(arrivals), max(arrivals)
    windows = [sum(arrivals.get(t, 0) for t in range(start, start + WINDOW_TICKS))
               for start in range(first, max(first, last - WINDOW_TICKS + 1) + 1)]
    per_window = args.rpm / 60 * WINDOW_TICKS / 10
    middle = sum(arrivals.get(t, 0) for t in range(first + WINDOW_TICKS, last - TAIL_TICKS))
    middle_ticks = last - TAIL_TICKS - first - WINDOW_TICKS
    return {"busiest": max(windows) / per_window, "first": windows[0] / per_window,
            "steady": (middle / (middle_ticks / 10) / (args.rpm / 60)) if middle_ticks > 0
            else float("nan"),
            "429": float(stats["by_status"].get("429", 0)), "wall_s": wall_s}


if __name__ == "__main__":
    main()
