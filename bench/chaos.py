"""Chaos runs on real services, outside pytest: one table of what each disturbance cost.

The same scenarios as ``tests/chaos`` (``testkit/chaos/scenarios.py``): SIGKILL two
workers in turn with jobs in flight; kill -9 Redis (AOF on) mid-run and restart it;
stop Postgres for 30 s mid-run; a judge with 30% 429 (Retry-After 1 s), 10% 500 and
5% 30-second hangs. Each runs on a Redis server and a PostgreSQL cluster of its own
(free ports, temporary directories, removed at the end), with the judge simulator in
this process and ``evalfleet worker`` processes.

    python -m bench.chaos                      # all four, about four minutes
    python -m bench.chaos sigkill judge_faults # some of them

Prints one row per scenario: jobs in, verdicts, dead letters, duplicates (verdict keys
stored twice), extra judge calls (200 replies not kept as the verdict) against the
scenario's bound, judge requests, and the time to drain; then each bound's reason and
any broken guarantee. Exits 1 when a guarantee broke.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

from evalfleet.judgesim import SimConfig, start_in_thread
from testkit.chaos.books import Figures, RunResult
from testkit.chaos.fleet import clean_environment
from testkit.chaos.scenarios import SCENARIOS
from testkit.chaos.services import ChaosServices


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO",
                        help=f"Any of {', '.join(SCENARIOS)} (default: all).")
    parser.add_argument("--keep-logs", action="store_true", help="Keep the worker logs.")
    args = parser.parse_args()
    names = args.scenarios or list(SCENARIOS)
    unknown = [name for name in names if name not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(unknown)}")
    clean_environment()
    log_root = Path(tempfile.mkdtemp(prefix="evalfleet-chaos-logs-"))
    print(f"setup: {platform.machine()}, {os.cpu_count()} cores, python "
          f"{platform.python_version()}; own redis-server (AOF everysec) and PostgreSQL "
          f"cluster; judge simulator in this process; worker logs in {log_root}", flush=True)
    results: list[RunResult] = []
    started = time.monotonic()
    sim = start_in_thread(SimConfig())
    try:
        with ChaosServices() as services:
            for name in names:
                result = SCENARIOS[name](services, sim, log_root / name)
                results.append(result)
                print(f"  {name}: {result.figures.drain_s:.1f} s to drain, "
                      f"{len(result.violations)} broken guarantee(s)", flush=True)
    finally:
        sim.stop()
    print()
    print(Figures.HEADER)
    for result in results:
        print(result.figures.row())
    print()
    for result in results:
        print(f"{result.figures.scenario}: extra judge calls <= {result.allowance.total}, "
              f"<= {result.allowance.per_sample} per sample: {result.allowance.reason}")
        for note in result.notes:
            print(f"    {note}")
        for violation in result.violations[:20]:
            print(f"    BROKEN: {violation}")
    print(f"\ntotal {time.monotonic() - started:.0f} s")
    broken = any(result.violations for result in results)
    if not args.keep_logs and not broken:
        shutil.rmtree(log_root, ignore_errors=True)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
