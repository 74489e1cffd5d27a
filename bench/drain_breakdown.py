"""Where a drain's time goes: the CPU of each process that serves it, per verdict.

Used by ``bench.check_throughput --breakdown``. Between two snapshots (the steady part
of a drain) it takes:

- the worker: its CPU (every thread, its check processes too) and, from
  ``/proc/<pid>/task/*/schedstat``, the time its threads ran and the time they were
  runnable but waiting for a CPU;
- Postgres: the CPU of the backends connected to the bench database (the worker's, and
  the bench's own poller apart, by ``application_name``) and of the server's own
  processes (WAL writer, checkpointer, background writer, autovacuum), from
  ``/proc/<pid>/stat``; the database's ``active_time`` and commits
  (``pg_stat_database``) and the roll-up trigger function's calls and time
  (``pg_stat_user_functions``, with ``track_functions`` set on the bench database);
- Redis's CPU, and this process's (the bench: its poller);
- the machine's busy share.

The server's own processes, Redis and the machine are shared with whatever else runs:
on a busy machine their figures include others' work.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

#: The ``application_name`` of the bench's own connection (it polls the verdict count).
POLLER = "evalfleet-bench-poll"

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[str, float]:
    """(command, CPU seconds) of ``pid``."""
    text = Path(f"/proc/{pid}/stat").read_text()
    name = text[text.index("(") + 1:text.rindex(")")]
    fields = text.rsplit(")", 1)[1].split()
    return name, (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _processes(name: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if _stat(int(entry.name))[0] == name:
                    found.append(int(entry.name))
            except (FileNotFoundError, ProcessLookupError):
                continue
    return found


def _cpu(pids: list[int]) -> dict[int, float]:
    cpu = {}
    for pid in pids:
        try:
            cpu[pid] = _stat(pid)[1]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return cpu


def _tree(pid: int) -> list[int]:
    pids, stack = [], [pid]
    while stack:
        current = stack.pop()
        pids.append(current)
        try:
            for task in Path(f"/proc/{current}/task").iterdir():
                stack.extend(int(child) for child in (task / "children").read_text().split())
        except FileNotFoundError:
            continue
    return pids


def _schedstat(pid: int) -> tuple[float, float]:
    """(ran, waited) seconds summed over ``pid``'s threads."""
    ran = waited = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            run_ns, wait_ns, _ = (task / "schedstat").read_text().split()
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
        ran += int(run_ns) / 1e9
        waited += int(wait_ns) / 1e9
    return ran, waited


def _machine() -> tuple[int, int]:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


@dataclass
class Snapshot:
    """Counters at one moment."""

    at: float
    verdicts: int
    worker: dict[int, float]
    ran: float
    waited: float
    postgres: dict[int, float]
    roles: dict[int, str]
    """Each Postgres process's part: ``worker``, ``poller``, ``server`` or ``other``."""
    redis: float
    bench: float
    machine: tuple[int, int]
    active_ms: float
    idle_in_transaction_ms: float
    commits: int
    trigger: dict[str, tuple[int, float, float]] = field(default_factory=dict)


class Breakdown:
    """Snapshots of the processes serving one drain on the database ``database``."""

    def __init__(self, admin_url: str, database_url: str, database: str, worker: int) -> None:
        self._admin = psycopg.connect(admin_url, autocommit=True)
        self._db = psycopg.connect(database_url, autocommit=True)
        self._database = database
        self._worker = worker

    @staticmethod
    def enable(admin_url: str, database: str) -> None:
        """Count the trigger functions' time on ``database`` (its new sessions)."""
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f"ALTER DATABASE {database} SET track_functions = 'pl'")

    def snapshot(self, verdicts: int) -> Snapshot:
        """The counters now (``verdicts``: stored so far)."""
        roles: dict[int, str] = {}
        for pid, datname, app, kind in self._admin.execute(
                "SELECT pid, datname, application_name, backend_type FROM pg_stat_activity"):
            if datname == self._database:
                roles[pid] = ("poller" if app == POLLER else "server"
                              if kind != "client backend" else "worker")
            elif datname is None:
                roles[pid] = "server"
            else:
                roles[pid] = "other"
        for pid in _processes("postgres"):
            roles.setdefault(pid, "server")  # the postmaster, autovacuum launcher, ...
        stats = self._admin.execute(
            "SELECT active_time, idle_in_transaction_time, xact_commit FROM pg_stat_database"
            " WHERE datname = %s", (self._database,)).fetchone()
        self._db.execute("SELECT pg_stat_clear_snapshot()")
        trigger = {name: (calls, total, own) for name, calls, total, own in self._db.execute(
            "SELECT funcname, calls, total_time, self_time FROM pg_stat_user_functions")}
        ran, waited = _schedstat(self._worker)
        times = os.times()
        return Snapshot(
            at=time.monotonic(), verdicts=verdicts, worker=_cpu(_tree(self._worker)),
            ran=ran, waited=waited, postgres=_cpu(list(roles)), roles=roles,
            redis=sum(_cpu(_processes("redis-server")).values()),
            bench=times.user + times.system, machine=_machine(),
            active_ms=float(stats[0] or 0) if stats else 0.0,
            idle_in_transaction_ms=float(stats[1] or 0) if stats else 0.0,
            commits=int(stats[2]) if stats else 0, trigger=trigger)

    def close(self) -> None:
        """Close the monitoring connections."""
        self._admin.close()
        self._db.close()


def report(start: Snapshot, end: Snapshot) -> list[str]:
    """Lines of the breakdown between ``start`` and ``end``, per verdict."""
    verdicts = max(end.verdicts - start.verdicts, 1)
    per = 1000 / verdicts  # seconds -> ms per verdict

    def delta(before: dict[int, float], after: dict[int, float], pids: set[int]) -> float:
        return sum(after[pid] - before.get(pid, 0.0) for pid in pids if pid in after)

    def role(name: str) -> float:
        pids = {pid for pid, part in end.roles.items() if part == name}
        return delta(start.postgres, end.postgres, pids) * per

    worker = delta(start.worker, end.worker, set(end.worker)) * per
    busy = end.machine[0] - start.machine[0]
    total = max(end.machine[1] - start.machine[1], 1)
    elapsed = end.at - start.at
    lines = [
        f"  over {verdicts:,} verdicts in {elapsed:.2f} s; ms per verdict of wall time "
        f"{elapsed * per:.3f}; machine busy {busy / total:.0%} of {os.cpu_count()} cores",
        f"  CPU ms per verdict: worker {worker:.3f} (its threads ran "
        f"{(end.ran - start.ran) * per:.3f}, waited runnable "
        f"{(end.waited - start.waited) * per:.3f}); Postgres backends of the worker "
        f"{role('worker'):.3f}, of the bench's poller {role('poller'):.3f}, server "
        f"processes {role('server'):.3f}; Redis {(end.redis - start.redis) * per:.3f}; "
        f"bench {(end.bench - start.bench) * per:.3f}; others' backends {role('other'):.3f}",
        f"  Postgres: commits per verdict {(end.commits - start.commits) / verdicts:.4f}, "
        f"active ms per verdict {(end.active_ms - start.active_ms) / verdicts:.3f}, idle in "
        f"transaction ms per verdict "
        f"{(end.idle_in_transaction_ms - start.idle_in_transaction_ms) / verdicts:.3f}",
    ]
    for name, (calls, total_ms, _own) in sorted(end.trigger.items()):
        before = start.trigger.get(name, (0, 0.0, 0.0))
        count = calls - before[0]
        if count:
            lines.append(f"  trigger {name}: {count:,} calls, {(total_ms - before[1]) / count:.3f}"
                         f" ms a call, {(total_ms - before[1]) / verdicts:.3f} ms per verdict")
    return lines
