"""CPU per judge call: the lean aiohttp client against the ``openai`` package's async client.

Setup: the judge simulator in its own process at a fixed latency; N rag_qa
requests at concurrency C from this process, each client in turn (twice, to
see the noise). CPU is this process's user+system time over the run.

    python bench/judge_client.py --requests 3000 --concurrency 256 --latency-ms 100
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import resource
import time
from collections.abc import Awaitable, Callable

import openai

from bench.worker_throughput import start_simulator
from evalfleet.core.metric import load_registry
from evalfleet.core.sample import parse_sample
from workers.judge import AsyncHttpJudge, JudgeRequest
from workers.renderer import render_messages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--latency-ms", type=float, default=100)
    args = parser.parse_args()
    sim, base_url = start_simulator(args.latency_ms)
    request = sample_request()
    print(f"setup: {platform.machine()}, {os.cpu_count()} cores, python "
          f"{platform.python_version()}, {args.requests} rag_qa requests at concurrency "
          f"{args.concurrency}, judge latency {args.latency_ms:g} ms (simulator in its own "
          f"process)")
    print(f"{'client':<14} {'requests/s':>11} {'CPU ms/request':>15}")
    clients: list[tuple[str, Callable[[], Awaitable[None]]]] = [
        ("aiohttp", lambda: run_http(base_url, request, args.requests, args.concurrency)),
        ("openai async", lambda: run_openai(base_url, request, args.requests, args.concurrency)),
    ]
    try:
        for _ in range(2):
            for name, run in clients:
                cpu_before, started = cpu_s(), time.monotonic()
                asyncio.run(run())
                elapsed = time.monotonic() - started
                print(f"{name:<14} {args.requests / elapsed:>11.0f} "
                      f"{1000 * (cpu_s() - cpu_before) / args.requests:>15.3f}", flush=True)
    finally:
        sim.terminate()
        sim.wait()


def sample_request() -> JudgeRequest:
    metric = load_registry().get("rag_qa")
    sample = parse_sample({"id": "bench", "input": "How long is the return window?",
                           "output": "30 days.", "context": ["Returns: 30 days."],
                           "reference": "30 days"})
    return JudgeRequest(messages=render_messages(metric, sample), model="judge-sim",
                        temperature=0.0, max_tokens=1024)


async def run_http(base_url: str, request: JudgeRequest, count: int, concurrency: int) -> None:
    client = AsyncHttpJudge(base_url=base_url, api_key="x", timeout_s=30,
                            max_connections=concurrency)
    slots = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with slots:
            await client.generate(request)

    await asyncio.gather(*(one() for _ in range(count)))
    await client.aclose()


async def run_openai(base_url: str, request: JudgeRequest, count: int, concurrency: int) -> None:
    client = openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=30)
    slots = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with slots:
            await client.chat.completions.create(**request.payload())

    await asyncio.gather(*(one() for _ in range(count)))
    await client.close()


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    main()
