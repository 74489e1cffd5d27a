"""Calls in flight against a judge that serves 8 at once: fixed 256, fixed 8, adaptive.

Setup: the judge simulator in its own process, serving ``--serve-at-once`` requests at a
time at a fixed latency (the rest queue inside it, as in a self-hosted server whose
slots are busy); ``--workers`` worker processes, each one judge fleet (the worker's
judge, without Celery or a broker) at concurrency C, fed batches of 16 rag_qa requests
from task threads as a worker feeds it, for ``--seconds``; a call that fails (a timeout,
above all) is sent again after ``--retry-s`` and counted as a retry, as the worker would
after its backoff. The caps on calls in flight are fleet-wide, held in Redis as leases
as the workers hold them (a cap of the fleet's whole concurrency or more is no cap):
none (C at once per worker), a fixed one equal to the server's slots, and the adaptive
one (one AIMD limit the workers share, ``workers/limiter/adaptive.py``), started at 1
and not told the server's size.

    python -m bench.adaptive_limit --workers 1 2 --seconds 20 --repeats 3

Prints, per run: verdicts/s (answers in the run's seconds, over them), timeouts, retries,
the p50 and p99 latency of the calls answered at the judge (from sent to answered) and
end to end (from handed to the fleet until answered, waits for a slot and retries
included), the most calls the server had at once, the workers' CPU per verdict, and the
adaptive limit's trajectory (min/median/max of the shared value, sampled every 50 ms
after the run's first second); then per worker count the median verdicts/s of each cap
over the repeats (runs alternate caps, so each repeat shares one machine state).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import redis

from bench.judge_client import sample_request
from bench.worker_throughput import redis_url, release_services, start_simulator
from evalfleet.core.errors import JudgeError
from workers.judge import AsyncHttpJudge, JudgeFleet, JudgeReply, JudgeRequest
from workers.judge.gate import InFlightCap
from workers.limiter.slots import KEY_PREFIX, LIMIT_SUFFIX, RedisSlots

BATCH = 16

#: Seconds between two samples of the adaptive limit, and the run's start left out.
SAMPLE_S, SETTLE_S = 0.05, 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="Length of each run.")
    parser.add_argument("--concurrency", type=int, default=256, help="C of each worker.")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--serve-at-once", type=int, default=8)
    parser.add_argument("--timeout-s", type=float, default=1.0,
                        help="The worker's judge timeout (EVALFLEET_JUDGE_TIMEOUT_S).")
    parser.add_argument("--caps", nargs="+", default=["256", "8", "adaptive"],
                        help="Fleet-wide caps: numbers (fixed; the fleet's concurrency or "
                             "more is no cap) or adaptive.")
    parser.add_argument("--retry-s", type=float, default=0.5,
                        help="Wait before a failed call is sent again (the worker's backoff).")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    sim, base_url = start_simulator(args.latency_ms)
    try:
        table(args, base_url)
    finally:
        sim.terminate()
        sim.wait(10)
        release_services()


def table(args: argparse.Namespace, base_url: str) -> None:
    """Every run, then the medians per worker count and cap."""
    load = os.getloadavg()
    print(f"setup: {platform.machine()}, {os.cpu_count()} cores (load average "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the start), {args.seconds:g} s per "
          f"run, rag_qa calls in batches of {BATCH}, concurrency {args.concurrency} per "
          f"worker, simulator serving {args.serve_at_once} at once at {args.latency_ms:g} ms, "
          f"judge timeout {args.timeout_s:g} s, failed calls sent again after "
          f"{args.retry_s:g} s, caps fleet-wide in Redis")
    print(f"{'workers':>7} {'cap':>10} {'verdicts/s':>10} {'timeouts':>8} {'retries':>8} "
          f"{'p50 ms':>7} {'p99 ms':>7} {'e2e p50':>8} {'e2e p99':>8} {'peak':>5} "
          f"{'CPU ms/v':>8} {'limit min/med/max':>18}")
    rates: dict[tuple[int, str], list[float]] = {}
    for workers in args.workers:
        for _ in range(args.repeats):
            for text in args.caps:
                name = "adaptive" if text == "adaptive" else f"fixed {text}"
                row = run(args, base_url, cap=text, workers=workers)
                rates.setdefault((workers, name), []).append(row["rate"])
                print(f"{workers:>7} {name:>10} {row['rate']:>10.1f} {row['timeouts']:>8} "
                      f"{row['retries']:>8} {row['p50']:>7.0f} {row['p99']:>7.0f} "
                      f"{row['e2e_p50']:>8.0f} {row['e2e_p99']:>8.0f} {row['peak']:>5} "
                      f"{row['cpu_ms']:>8.2f} {row['trajectory']:>18}", flush=True)
    print("median verdicts/s over the repeats, and against the best fixed cap:")
    for workers in args.workers:
        medians = {name: statistics.median(values) for (count, name), values in rates.items()
                   if count == workers}
        fixed = [rate for name, rate in medians.items() if name != "adaptive"]
        best = max(fixed) if fixed else float("nan")
        print(f"  {workers} worker(s): " + ", ".join(
            f"{name} {rate:.1f} ({rate / best:.0%})" for name, rate in medians.items()))


def run(args: argparse.Namespace, base_url: str, *, cap: str, workers: int) -> dict[str, Any]:
    """One cap with ``workers`` worker processes; their answers pooled."""
    url = redis_url()
    client = redis.Redis.from_url(url)
    _flush(client)
    _sim_call(base_url, "POST", "/_sim/reset")
    _sim_call(base_url, "PUT", "/_sim/config", {"latency_ms": args.latency_ms,
                                                "serve_at_once": args.serve_at_once})
    whole = workers * args.concurrency
    spec = {"base_url": base_url, "redis_url": url, "concurrency": args.concurrency,
            "cap": None if cap != "adaptive" and int(cap) >= whole else cap,
            "seconds": args.seconds, "timeout_s": args.timeout_s, "retry_s": args.retry_s}
    children = [subprocess.Popen([sys.executable, "-m", "bench.adaptive_limit", "--child",
                                  json.dumps(spec)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True) for _ in range(workers)]
    for process in children:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    samples: list[float] = []
    done = threading.Event()
    sampler = threading.Thread(target=_sample_limit, args=(client, samples, done))
    for process in children:
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()
    sampler.start()
    results = []
    for process in children:
        out, _ = process.communicate(timeout=args.seconds + 120)
        results.append(json.loads(out))
    done.set()
    sampler.join()
    stats = _sim_call(base_url, "GET", "/_sim/stats")
    client.close()
    return _pool(results, seconds=args.seconds, samples=samples,
                 peak=int(stats["max_in_flight"]))


def _pool(results: list[dict[str, Any]], *, seconds: float, samples: list[float],
          peak: int) -> dict[str, Any]:
    latencies = [value for result in results for value in result["latencies"]]
    ends = [value for result in results for value in result["ends"]]
    trajectory = "-"
    if samples:
        trajectory = (f"{min(samples):.1f}/{statistics.median(samples):.1f}/"
                      f"{max(samples):.1f}")
    return {"rate": len(latencies) / seconds,
            "timeouts": sum(result["timeouts"] for result in results),
            "retries": sum(result["retries"] for result in results),
            "p50": _pct(latencies, 50), "p99": _pct(latencies, 99),
            "e2e_p50": _pct(ends, 50), "e2e_p99": _pct(ends, 99), "peak": peak,
            "cpu_ms": 1000 * sum(result["cpu_s"] for result in results) / max(1, len(latencies)),
            "trajectory": trajectory}


def _sample_limit(client: redis.Redis, samples: list[float], done: threading.Event) -> None:
    started = time.monotonic()
    key: bytes | None = None
    while not done.wait(SAMPLE_S):
        if key is None:
            key = next(iter(client.scan_iter(match=f"{KEY_PREFIX}*{LIMIT_SUFFIX}")), None)
        if key is not None and time.monotonic() - started >= SETTLE_S:
            value = client.hget(key, "limit")
            if value is not None:
                samples.append(float(value))  # type: ignore[arg-type]


def child(spec: dict[str, Any]) -> None:
    """One worker: says ``ready``, waits for ``go``, judges for the run's seconds, prints
    its answers as JSON and leaves at once (calls still out are abandoned)."""
    cap, concurrency = spec["cap"], spec["concurrency"]
    limit = InFlightCap(slots=RedisSlots(spec["redis_url"]),
                        limit_for=lambda model: None if cap == "adaptive" else int(cap),
                        lease_s=spec["timeout_s"] + 5, max_wait_s=3600,
                        adaptive_max=concurrency if cap == "adaptive" else None)
    fleet = JudgeFleet(AsyncHttpJudge(base_url=spec["base_url"], api_key=None,
                                      timeout_s=spec["timeout_s"], max_connections=concurrency),
                       concurrency=concurrency, cap=limit if cap is not None else None)
    print("ready", flush=True)
    sys.stdin.readline()
    result = judge_for(fleet, seconds=spec["seconds"], concurrency=concurrency,
                       retry_s=spec["retry_s"])
    print(json.dumps(result), flush=True)
    os._exit(0)


def judge_for(fleet: JudgeFleet, *, seconds: float, concurrency: int,
              retry_s: float) -> dict[str, Any]:
    """Batches from task threads until ``seconds`` have passed; what arrived within them."""
    request = sample_request()
    latencies: list[float] = []
    ends: list[float] = []
    counts = {"timeouts": 0, "retries": 0}
    started = time.monotonic()
    deadline = started + seconds
    lock = threading.Lock()

    def batch() -> None:
        handed = time.monotonic()
        pending: list[JudgeRequest] = [request] * BATCH
        while pending and time.monotonic() < deadline:
            answers = fleet.complete_many(pending)
            now, pending = time.monotonic(), []
            with lock:
                for answer in answers:
                    if isinstance(answer, JudgeReply):
                        if now < deadline:
                            latencies.append(answer.latency_ms)
                            ends.append((now - handed) * 1000)
                        continue
                    assert isinstance(answer, JudgeError), answer
                    counts["timeouts"] += "timed out" in str(answer)
                    counts["retries"] += 1
                    pending.append(request)
            if pending:
                time.sleep(retry_s)

    def feed() -> None:
        while time.monotonic() < deadline:
            batch()

    cpu_start = _cpu_s()
    threads = max(2, 2 * concurrency // BATCH)
    pool = ThreadPoolExecutor(threads)
    for _ in range(threads):
        pool.submit(feed)
    time.sleep(max(0.0, deadline - time.monotonic()))
    with lock:
        return {"latencies": list(latencies), "ends": list(ends), **counts,
                "cpu_s": _cpu_s() - cpu_start}


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _pct(values: list[float], pct: int) -> float:
    return statistics.quantiles(values, n=100)[pct - 1] if len(values) > 1 else float("nan")


def _flush(client: redis.Redis) -> None:
    for key in client.scan_iter(match=f"{KEY_PREFIX}*"):
        client.delete(key)


def _sim_call(base_url: str, method: str, path: str,
              body: dict[str, Any] | None = None) -> dict[str, Any]:
    root = base_url.removesuffix("/v1")
    request = urllib.request.Request(
        f"{root}{path}", method=method, data=json.dumps(body).encode() if body else None,
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        text = answer.read()
    return json.loads(text) if text else {}


if __name__ == "__main__":
    main()
