"""Calls in flight against a judge that serves 8 at once: fixed 256, fixed 8, adaptive.

Setup: the judge simulator in its own process, serving ``--serve-at-once`` requests at a
time at a fixed latency (the rest queue inside it, as in a self-hosted server whose
slots are busy); one judge fleet (the worker's judge, without Celery or a broker) at
concurrency C, fed batches of 16 rag_qa requests from task threads as a worker feeds it;
a call that fails (a timeout, above all) is sent again after ``--retry-s`` and counted
as a retry, as the worker would after its backoff. Three caps on calls in flight: none (C at once),
a fixed one equal to the server's slots, and the adaptive one (AIMD,
``workers/limiter/adaptive.py``), started at 1 and not told the server's size.

    python -m bench.adaptive_limit --calls 1200 --concurrency 256 --latency-ms 100

Prints verdicts/s (answers per second of wall time), timeouts, retries and the p50 and
p99 latency of the calls answered, at the judge (from sent to answered) and end to end
(from handed to the fleet until answered, waits for a slot and retries included).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.judge_client import sample_request
from bench.worker_throughput import start_simulator
from evalfleet.core.errors import JudgeError
from workers.judge import AsyncHttpJudge, JudgeFleet, JudgeReply, JudgeRequest
from workers.judge.gate import InFlight, InFlightCap
from workers.limiter.slots import LocalSlots

BATCH = 16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1200)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--serve-at-once", type=int, default=8)
    parser.add_argument("--timeout-s", type=float, default=1.0,
                        help="The worker's judge timeout (EVALFLEET_JUDGE_TIMEOUT_S).")
    parser.add_argument("--caps", nargs="+", default=["256", "8", "adaptive"],
                        help="Caps to run: numbers (fixed; C or more is no cap) or adaptive.")
    parser.add_argument("--retry-s", type=float, default=0.5,
                        help="Wait before a failed call is sent again (the worker's backoff).")
    args = parser.parse_args()
    sim, base_url = start_simulator(args.latency_ms)
    try:
        _configure(base_url, serve_at_once=args.serve_at_once)
        print(f"setup: {platform.machine()}, {_cores()} cores, {args.calls} rag_qa calls in "
              f"batches of {BATCH}, concurrency {args.concurrency}, simulator serving "
              f"{args.serve_at_once} at once at {args.latency_ms:g} ms, judge timeout "
              f"{args.timeout_s:g} s, failed calls sent again after {args.retry_s:g} s")
        header = (f"{'cap':>10} {'verdicts/s':>11} {'timeouts':>9} {'retries':>8} "
                  f"{'p50 ms':>7} {'p99 ms':>7} {'e2e p50':>8} {'e2e p99':>8} {'limit':>6}")
        print(header)
        for text in args.caps:
            name = "adaptive" if text == "adaptive" else f"fixed {text}"
            cap = 0 if text == "adaptive" else (None if int(text) >= args.concurrency
                                                 else int(text))
            row = run(base_url, cap=cap, calls=args.calls, concurrency=args.concurrency,
                      timeout_s=args.timeout_s, retry_s=args.retry_s)
            print(f"{name:>10} {row['rate']:>11.1f} {row['timeouts']:>9} {row['retries']:>8} "
                  f"{row['p50']:>7.0f} {row['p99']:>7.0f} {row['e2e_p50']:>8.0f} "
                  f"{row['e2e_p99']:>8.0f} {row['limit']:>6}")
    finally:
        sim.terminate()
        sim.wait(10)


def run(base_url: str, *, cap: int | None, calls: int, concurrency: int,
        timeout_s: float, retry_s: float) -> dict[str, Any]:
    """One cap: ``None`` none, ``0`` adaptive, else fixed."""
    limit = InFlightCap(slots=LocalSlots(), limit_for=lambda model: cap or None,
                        lease_s=timeout_s + 5, max_wait_s=3600,
                        adaptive_max=concurrency if cap == 0 else None)
    fleet = JudgeFleet(AsyncHttpJudge(base_url=base_url, api_key=None, timeout_s=timeout_s,
                                      max_connections=concurrency),
                       concurrency=concurrency, cap=limit if cap is not None else None)
    request = sample_request()
    latencies: list[float] = []
    ends: list[float] = []
    counts = {"timeouts": 0, "retries": 0}

    def batch(size: int) -> None:
        started = time.monotonic()
        pending: list[JudgeRequest] = [request] * size
        while pending:
            answers = fleet.complete_many(pending)
            pending = []
            for answer in answers:
                if isinstance(answer, JudgeReply):
                    latencies.append(answer.latency_ms)
                    ends.append((time.monotonic() - started) * 1000)
                    continue
                assert isinstance(answer, JudgeError), answer
                counts["timeouts"] += "timed out" in str(answer)
                counts["retries"] += 1
                pending.append(request)
            if pending:
                time.sleep(retry_s)

    started = time.monotonic()
    threads = max(2, 2 * concurrency // BATCH)
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(batch, [BATCH] * (calls // BATCH)))
    elapsed_s = time.monotonic() - started
    layer = next(layer for layer in fleet.layers if isinstance(layer, InFlight))
    adapted = [aimd.current for aimd in layer.adaptive.values()]
    fleet.close()
    return {"rate": len(latencies) / elapsed_s, **counts,
            "p50": _pct(latencies, 50), "p99": _pct(latencies, 99),
            "e2e_p50": _pct(ends, 50), "e2e_p99": _pct(ends, 99),
            "limit": adapted[0] if adapted else (cap or concurrency)}


def _pct(values: list[float], pct: int) -> float:
    return statistics.quantiles(values, n=100)[pct - 1] if len(values) > 1 else float("nan")


def _configure(base_url: str, **changes: Any) -> None:
    root = base_url.removesuffix("/v1")
    put = urllib.request.Request(f"{root}/_sim/config", data=json.dumps(changes).encode(),
                                 method="PUT", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(put, timeout=10) as answer:
        assert answer.status == 200


def _cores() -> int:
    return os.cpu_count() or 1


if __name__ == "__main__":
    main()
