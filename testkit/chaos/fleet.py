"""One chaos run: a fresh database and broker, worker processes, and the books it keeps.

A run enqueues samples, starts ``evalfleet worker`` processes, lets a scenario
disturb the fleet, waits until every accepted sample has its verdict or dead
letter and the broker holds no message, then checks its :class:`Ledger` with
:func:`~testkit.chaos.books.broken_guarantees`.

While it runs, a watcher notes each sample's judge calls at the moment its
verdict is first seen stored, so a call after that shows. The judge simulator
counts 200 replies per prompt (``answered_by_prompt``; hangs the client gave up
on are not replies), so an extra judge call is a verdict the fleet was handed and
threw away, never a 429, a 500 or a timeout.

Nothing here imports pytest: ``bench/chaos.py`` runs the same code.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from evalfleet.core.errors import BrokerUnavailable
from evalfleet.core.message import Job, new_job, queue_for
from evalfleet.core.metric import load_registry
from evalfleet.core.sample import parse_sample
from evalfleet.core.settings import Settings
from evalfleet.judgesim import RunningSim, SimConfig, prompt_key
from evalfleet.store import VerdictKey
from producers.enqueuer import Enqueuer
from testkit.chaos.books import (
    Allowance,
    Figures,
    Ledger,
    RunResult,
    broken_guarantees,
    extra_calls,
)
from testkit.chaos.services import ChaosServices
from testkit.process import WorkerProcess
from workers.renderer import render_messages

logger = logging.getLogger(__name__)

#: Seconds between two looks of the watcher and of the drain check.
POLL_S = 0.5

#: Seconds a libpq connection attempt may take (the database may be down on purpose).
CONNECT_TIMEOUT_S = 2

#: Settings every chaos run starts from: short timeouts so crashed work comes back
#: within seconds, still passing the settings' own checks (visibility timeout above
#: two judge calls plus the longest backoff, claim lease above two judge calls).
BASE_SETTINGS: dict[str, Any] = {
    "judge_model": "judge-sim", "judge_timeout_s": 2.0, "retry_base_s": 0.2,
    "retry_max_s": 2.0, "visibility_timeout_s": 7, "claim_lease_s": 30, "batch_size": 8,
}

_APPS = ("support-bot", "hr-assistant", "docs-search")


@dataclass(frozen=True)
class _Expected:
    metric: str
    prompt: str
    """The simulator's key for the rendered judge prompt."""
    claim: str
    """Digest of the verdict key, as the claims table names it."""


def make_sample(n: int, *, prefix: str) -> dict[str, Any]:
    """One distinct RAG sample (JSON form) numbered ``n``."""
    days = 14 + n % 3
    return {
        "id": f"{prefix}-{n:04d}", "timestamp": f"2026-11-21T11:{n % 60:02d}:00Z",
        "input": f"Can I still send back parcel #{5000 + n} after {days - 1} days?",
        "output": f"Yes, parcels can be sent back within {days} days.",
        "context": [f"Parcels may be sent back within {days} days of arrival.",
                    "Refunds reach the original card in five working days."],
        "reference": None if n % 5 == 0 else f"Within {days} days.",
        "attributes": {"app": _APPS[n % 3], "route": "/chat"},
    }


class ChaosRun:
    """The fleet of one scenario: database, broker, workers, and its books."""

    def __init__(self, name: str, *, services: ChaosServices, sim: RunningSim,
                 log_dir: Path, sim_config: dict[str, Any] | None = None,
                 **overrides: Any) -> None:
        """Create the run's database, empty the broker, reset the simulator.

        Args:
            name: Scenario name (names the database and the logs).
            services: The run's own Redis and Postgres.
            sim: The judge simulator: counters reset, configured with ``sim_config``
                over its defaults.
            log_dir: Where worker logs go.
            sim_config: Simulator settings (latency, faults).
            **overrides: Settings on top of :data:`BASE_SETTINGS`.
        """
        self.name = name
        self.services = services
        self.sim = sim
        self.log_dir = log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        database_url = services.postgres.create_database(f"chaos_{name}")
        self.libpq_url = database_url.replace("+psycopg", "")
        with services.redis.client() as client:
            client.flushall()
        sim.configure(**{**SimConfig().as_json(), **(sim_config or {})})
        sim.reset()
        self.settings = Settings(
            _env_file=None, database_url=database_url,  # type: ignore[call-arg]
            broker_url=services.redis.url, openai_base_url=sim.base_url,
            data_dir=log_dir / "data", **{**BASE_SETTINGS, **overrides},
        )
        self.registry = load_registry()
        self.expected: dict[str, _Expected] = {}
        self.accepted: set[str] = set()
        self._accepted_lock = threading.Lock()  # a producer thread may add to it
        self.workers: list[WorkerProcess] = []
        self.notes: list[str] = []
        self.started = time.monotonic()
        self._answers_at_end: dict[str, int] | None = None
        self._watch = _Watch(self)

    # -- building the load ------------------------------------------------------------

    def jobs(self, metric: str, count: int, *, prefix: str) -> list[Job]:
        """``count`` new jobs of ``metric``; their prompts and claims are noted."""
        jobs = []
        metric_spec = self.registry.get(metric)
        model = self.settings.judge_model_for(metric, metric_default=metric_spec.spec.judge.model)
        for n in range(count):
            sample = parse_sample(make_sample(n, prefix=prefix))
            key = VerdictKey(sample.id, metric, metric_spec.version, model)
            self.expected[sample.id] = _Expected(
                metric, prompt_key(render_messages(metric_spec, sample)), key.digest())
            jobs.append(new_job(metric, sample))
        return jobs

    def enqueue(self, jobs: Sequence[Job], *, chunk: int = 50, pause_s: float = 0.0,
                give_up_s: float = 60.0) -> None:
        """Publish ``jobs`` as a producer would, ``chunk`` at a time; retry a chunk the
        broker refused (publishing again is safe: one verdict per key).

        Raises:
            BrokerUnavailable: When a chunk still fails after ``give_up_s``.
        """
        enqueuer = Enqueuer(self.settings)
        try:
            for start in range(0, len(jobs), chunk):
                part = jobs[start:start + chunk]
                self._publish(enqueuer, part, give_up_s=give_up_s)
                with self._accepted_lock:
                    self.accepted.update(job.sample.id for job in part)
                if pause_s:
                    time.sleep(pause_s)
        finally:
            enqueuer.close()

    def _publish(self, enqueuer: Enqueuer, jobs: Sequence[Job], *, give_up_s: float) -> None:
        deadline = time.monotonic() + give_up_s
        while True:
            try:
                enqueuer.send_many(jobs)
                return
            except BrokerUnavailable as exc:
                if time.monotonic() > deadline:
                    raise
                self.note(f"producer: {exc}; publishing {len(jobs)} jobs again")
                time.sleep(0.5)

    # -- the fleet --------------------------------------------------------------------

    def start_worker(self, queues: list[str], *, concurrency: int,
                     settings: Settings | None = None, wait: bool = True) -> WorkerProcess:
        """Start an ``evalfleet worker`` on ``queues``; the watcher starts with the first."""
        if not self.workers:
            self.started = time.monotonic()
            self._watch.start()
        worker = WorkerProcess(settings or self.settings, queues=queues,
                               concurrency=concurrency,
                               log_path=self.log_dir / f"worker-{len(self.workers)}.log")
        self.workers.append(worker)
        if wait:
            worker.wait_ready()
        return worker

    def note(self, text: str) -> None:
        """Log a step of the scenario with the run's clock."""
        line = f"{time.monotonic() - self.started:6.1f}s {text}"
        self.notes.append(line)
        logger.info("%s: %s", self.name, line)

    def disturbance_over(self) -> None:
        """Mark the end of the disturbance: from now on a sample gets one 200 at most."""
        self._answers_at_end = dict(self.sim.stats()["answered_by_prompt"])
        self.note("disturbance over")

    # -- looking at the books ---------------------------------------------------------

    def _query(self, sql: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.libpq_url, connect_timeout=CONNECT_TIMEOUT_S) as conn:
            return conn.execute(sql).fetchall()

    def verdict_count(self) -> int:
        """Verdicts stored so far; -1 while the database cannot be reached."""
        try:
            return int(self._query("SELECT count(*) FROM verdicts")[0][0])
        except psycopg.OperationalError:
            return -1

    def stored_ids(self) -> set[str]:
        """Samples with a verdict.

        Raises:
            psycopg.OperationalError: While the database cannot be reached.
        """
        return {row[0] for row in self._query("SELECT sample_id FROM verdicts")}

    def claimed_ids(self) -> set[str]:
        """Samples whose verdict key is claimed now (judged or about to be)."""
        by_digest = {expected.claim: sample_id for sample_id, expected in self.expected.items()}
        return {by_digest[row[0]] for row in self._query("SELECT key FROM claims")
                if row[0] in by_digest}

    def open_calls(self) -> set[str]:
        """Samples with a judge call sent and not answered yet (the simulator's view)."""
        stats = self.sim.stats()
        calls, answered = stats["by_prompt"], stats["answered_by_prompt"]
        return {sample_id for sample_id, expected in self.expected.items()
                if calls.get(expected.prompt, 0) > answered.get(expected.prompt, 0)}

    def answered(self) -> dict[str, int]:
        """200 replies per sample so far."""
        return self._per_sample(self.sim.stats()["answered_by_prompt"])

    def settled_by_metric(self) -> dict[str, tuple[int, int]]:
        """(verdicts, dead letters) per metric."""
        counts = dict.fromkeys({expected.metric for expected in self.expected.values()}, (0, 0))
        for metric, verdicts in self._query("SELECT metric, count(*) FROM verdicts GROUP BY 1"):
            counts[metric] = (int(verdicts), counts.get(metric, (0, 0))[1])
        for metric, letters in self._query(
                "SELECT metric, count(*) FROM dead_letters GROUP BY 1"):
            counts[metric] = (counts.get(metric, (0, 0))[0], int(letters))
        return counts

    def _settled(self) -> bool:
        rows = self._query("SELECT sample_id FROM verdicts UNION SELECT sample_id "
                           "FROM dead_letters")
        with self._accepted_lock:
            accepted = set(self.accepted)
        if not accepted <= {row[0] for row in rows}:
            return False
        with self.services.redis.client() as client:
            metrics = {expected.metric for expected in self.expected.values()}
            waiting = sum(client.llen(queue_for(metric)) for metric in metrics)
            return waiting == 0 and client.hlen("unacked") == 0

    def wait_settled(self, *, timeout_s: float) -> float | None:
        """Wait until every accepted sample is settled and the broker holds nothing.

        Returns:
            Seconds since the workers started, or None when ``timeout_s`` ran out.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if self._settled():
                    return time.monotonic() - self.started
            except (psycopg.OperationalError, OSError):
                pass
            time.sleep(POLL_S)
        return None

    def wait_verdicts(self, count: int, *, timeout_s: float = 60.0) -> None:
        """Block until ``count`` verdicts are stored.

        Raises:
            TimeoutError: After ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        while self.verdict_count() < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: fewer than {count} verdicts after "
                                   f"{timeout_s:g} s")
            time.sleep(0.1)

    # -- the end ----------------------------------------------------------------------

    def finish(self, allowance: Allowance, *, drain_timeout_s: float) -> RunResult:
        """Wait for the fleet to drain, stop it, and check the books."""
        drain_s = self.wait_settled(timeout_s=drain_timeout_s)
        self.note("drained" if drain_s is not None else "did not drain")
        self._watch.halt()
        self.stop_workers()
        ledger = self.ledger()
        violations = broken_guarantees(ledger, allowance)
        if drain_s is None:
            violations.append(f"did not drain within {drain_timeout_s:g} s: {self._backlog()}")
        figures = Figures(
            scenario=self.name, jobs_in=len(self.accepted),
            verdicts=sum(ledger.verdicts.values()),
            dead_letters=sum(ledger.dead_letters.values()), duplicates=ledger.duplicate_keys,
            extra_judge_calls=sum(extra_calls(ledger).values()),
            allowed_extra=allowance.total, judge_requests=int(self.sim.stats()["requests"]),
            drain_s=drain_s if drain_s is not None else float("nan"),
        )
        return RunResult(figures, allowance, tuple(violations), tuple(self.notes))

    def ledger(self) -> Ledger:
        """The run's books as they stand: the database's rows and the judge's counters."""
        duplicates = int(self._query(
            "SELECT count(*) FROM (SELECT 1 FROM verdicts GROUP BY sample_id, metric, "
            "prompt_version, judge_model HAVING count(*) > 1) AS twice")[0][0])
        stats = self.sim.stats()
        return Ledger(
            accepted=frozenset(self.accepted),
            verdicts=Counter(row[0] for row in self._query("SELECT sample_id FROM verdicts")),
            dead_letters=Counter(
                row[0] for row in self._query("SELECT sample_id FROM dead_letters")),
            answered=self._per_sample(stats["answered_by_prompt"]),
            calls=self._per_sample(stats["by_prompt"]),
            calls_when_stored=dict(self._watch.calls_when_stored),
            duplicate_keys=duplicates,
            answered_at_end=(None if self._answers_at_end is None
                             else self._per_sample(self._answers_at_end)),
        )

    def _per_sample(self, by_prompt: dict[str, int]) -> dict[str, int]:
        return {sample_id: by_prompt.get(expected.prompt, 0)
                for sample_id, expected in self.expected.items()}

    def _backlog(self) -> str:
        rows = self._query("SELECT sample_id FROM verdicts UNION SELECT sample_id "
                           "FROM dead_letters")
        unsettled = sorted(self.accepted - {row[0] for row in rows})
        with self.services.redis.client() as client:
            metrics = sorted({expected.metric for expected in self.expected.values()})
            waiting = {metric: client.llen(queue_for(metric)) for metric in metrics}
            unacked = client.hlen("unacked")
        return (f"{len(unsettled)} samples unsettled {unsettled[:5]}, messages waiting "
                f"{waiting}, {unacked} delivered but unacknowledged")

    def stop_workers(self) -> None:
        """Warm-stop every worker still running."""
        for worker in self.workers:
            worker.stop()

    def close(self) -> None:
        """Stop the watcher and the workers (safe to call twice, and after a failure)."""
        self._watch.halt()
        self.stop_workers()

    def worker_logs(self) -> str:
        """The tail of every worker log, for a failure message."""
        parts = []
        for path in sorted(self.log_dir.glob("worker-*.log")):
            text = path.read_text(errors="replace")
            parts.append(f"--- {path.name} (last 3000 chars)\n{text[-3000:]}")
        return "\n".join(parts)


@dataclass
class _Watch:
    """Notes each sample's judge calls at the moment its verdict is first seen stored.

    The verdicts are read before the simulator's counters, so a call counted after
    that can only be one made after the verdict was stored.
    """

    run: ChaosRun
    calls_when_stored: dict[str, int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="chaos-watch", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(POLL_S):
            self.look()

    def look(self) -> None:
        try:
            stored = self.run.stored_ids() - set(self.calls_when_stored)
        except psycopg.OperationalError:
            return  # the database is down on purpose; look again later
        if not stored:
            return
        calls = self.run.sim.stats()["by_prompt"]
        for sample_id in stored:
            expected = self.run.expected.get(sample_id)
            if expected is not None:
                self.calls_when_stored[sample_id] = calls.get(expected.prompt, 0)

    def halt(self) -> None:
        if self._thread is None or self._stop.is_set():
            return
        self._stop.set()
        self._thread.join()
        self.look()


def clean_environment() -> None:
    """Drop evalfleet and OpenAI settings from this process's environment, so worker
    processes get only the run's settings."""
    for name in list(os.environ):
        if name.startswith(("EVALFLEET_", "OPENAI_")) and not name.startswith("EVALFLEET_TEST_"):
            del os.environ[name]
