"""A fleet-wide rate limit: configured RPM against achieved, the peak 10 s window, 429s.

Setup: the judge simulator in its own process enforcing the provider's limit
(``--rpm``: over it in its sliding minute it answers 429), several ``evalfleet
worker`` processes sharing one budget of ``--rpm`` through Redis, and enough
rag_qa jobs to keep them busy for ``--seconds``. The simulator counts arrivals
per 100 ms; the peak is the most requests in any 10 s window, scaled to a
minute.

    python -m bench.rate_limit --rpm 3000 --seconds 60 --workers 2
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import httpx

from bench.worker_throughput import enqueue, fresh_services, start_simulator, start_worker
from workers.store import open_store

#: The window the peak is measured over, in 100 ms ticks.
WINDOW_TICKS = 100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rpm", type=float, default=3000)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency-ms", type=float, default=200)
    args = parser.parse_args()
    jobs = int(args.rpm / 60 * args.seconds)
    sim, base_url = start_simulator(args.latency_ms, extra=["--rpm-limit", str(int(args.rpm))])
    settings = fresh_services(base_url).model_copy(update={"judge_rpm": args.rpm})
    print(f"setup: {platform.machine()}, {os.cpu_count()} cores, {args.workers} workers x "
          f"C={args.concurrency} sharing judge_rpm={args.rpm:g} through Redis; simulator "
          f"at {args.latency_ms:g} ms answering 429 over {args.rpm:g} requests in any 60 s; "
          f"{jobs} rag_qa jobs")
    enqueue(settings, jobs)
    store = open_store(settings.resolved_database_url())
    workers = [start_worker(settings, concurrency=args.concurrency, name=f"rate-{n}")
               for n in range(args.workers)]
    try:
        started = time.monotonic()
        while store.counts().verdicts < jobs:
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        stats = httpx.get(base_url.rsplit("/v1", 1)[0] + "/_sim/stats").json()
    finally:
        for worker in workers:
            worker.terminate()
            worker.wait()
        store.close()
        sim.terminate()
        sim.wait()
    arrivals = {int(tick): n for tick, n in stats["arrivals_per_100ms"].items()}
    ticks = range(min(arrivals), max(arrivals) + 1)
    span_s = len(ticks) / 10
    windows = [sum(arrivals.get(t, 0) for t in range(start, start + WINDOW_TICKS))
               for start in range(ticks.start, ticks.stop - WINDOW_TICKS + 1)]
    peak_rpm = max(windows) * 60 / (WINDOW_TICKS / 10)
    achieved_rpm = stats["requests"] / span_s * 60
    print(f"{'configured RPM':>15} {'achieved RPM':>13} {'of limit':>9} {'peak 10 s RPM':>14} "
          f"{'peak/limit':>11} {'429s':>6} {'verdicts':>9} {'wall s':>7}")
    print(f"{args.rpm:>15.0f} {achieved_rpm:>13.0f} {achieved_rpm / args.rpm:>9.1%} "
          f"{peak_rpm:>14.0f} {peak_rpm / args.rpm:>11.1%} "
          f"{stats['by_status'].get('429', 0):>6} {jobs:>9} {elapsed:>7.1f}")


if __name__ == "__main__":
    main()
