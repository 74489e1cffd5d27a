"""``evalfleet demo``: the whole fleet on one machine, over the bundled sample set.

Steps: pick the embedded defaults where nothing is configured, create the
schema, start the judge simulator when no judge is configured, enqueue the
samples, run one worker process until every job has ended as a verdict or a
dead letter, print a summary per metric and segment, then run the alert engine
over the traffic's hours and print the alert that fired with its evidence.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

from evalfleet.core.errors import InvalidSample
from evalfleet.core.message import Job
from evalfleet.core.metric import load_registry
from evalfleet.core.settings import Settings, mask_url
from evalfleet.demo.alerting import RULE_NAME, demo_rules_file, replay_alerts
from evalfleet.demo.summary import format_summary, summarise
from evalfleet.localfleet import SIMULATOR_MODEL, start_simulator, start_worker, stop_worker
from evalfleet.store import DeadLetter, VerdictRecord, VerdictStore, migrate, open_store
from producers.enqueuer import Enqueuer
from producers.pipeline import produce
from producers.source import read_lines

#: Longest the demo waits for the worker to finish, in seconds.
DRAIN_TIMEOUT_S = 300.0

#: Where ``evalfleet ui`` serves by default.
UI_URL = "http://127.0.0.1:8500"

#: Metrics the demo enqueues each sample for (those the samples carry inputs for).
DEMO_METRICS = ("rag_qa", "context_precision")

#: The review slice of the demo's own store, when none is configured: every rag_qa
#: verdict (the alert's metric), so the alert's segments hold enough items to label.
DEMO_REVIEW_RATES = {"rag_qa": 1.0}


def run_demo(
    settings: Settings, *, samples_path: str | None, concurrency: int, command: str,
    echo: Callable[[str], None],
) -> int:
    """Run the demo and print its summary.

    Args:
        settings: The settings as configured (embedded defaults filled in here).
        samples_path: The samples to use instead of the bundled set.
        concurrency: The worker's concurrency.
        command: How the user's shell runs evalfleet (``.venv/bin/evalfleet``), for
            the commands printed at the end.
        echo: Where to print.

    Returns:
        The process exit code: 0 when every job ended as a verdict.
    """
    settings = _demo_settings(settings)
    samples = samples_path or str(resources.files("evalfleet.demo") / "samples.jsonl")
    with ExitStack() as stack:
        if settings.judge.openai_base_url is None:
            # The verdicts name the simulator as their judge, not a model nobody asked.
            settings = settings.model_copy(update={
                "openai_base_url": start_simulator(stack), "judge_model": SIMULATOR_MODEL,
                "judge_models": {}})
            echo("No OPENAI_BASE_URL is set: started the judge simulator. "
                 "The scores below are SIMULATED, not real judgements.")
        echo(f"database: {_describe_database(settings)}; broker: {_describe_broker(settings)}")
        if settings.review.review_rates == DEMO_REVIEW_RATES:
            echo(f"review queue: EVALFLEET_REVIEW_RATES={json.dumps(DEMO_REVIEW_RATES)}, "
                 "every rag_qa verdict waits for a person's label")
        store = open_store(settings.resolved_database_url())
        stack.callback(store.close)
        migrate(store.engine)

        registry = load_registry(settings.judge.metrics_dir)
        metrics = [registry.get(name) for name in DEMO_METRICS]
        # In a shared database, tag this run's ids so its verdicts are new and its own.
        started_at = datetime.now(UTC)
        tag = "" if settings.embedded_database else f"@{started_at:%Y%m%dT%H%M%S}"
        errors: list[InvalidSample] = []
        jobs: list[Job] = []
        stats = produce(_tagged(read_lines(samples), tag), metrics=metrics, rate=1.0,
                        send=jobs.append, on_error=errors.append)
        enqueuer = Enqueuer(settings)
        try:
            enqueuer.send_many(jobs)
        finally:
            enqueuer.close()
        for error in errors:
            echo(f"rejected: {error}")
        echo(f"enqueued {stats.jobs} jobs from {stats.accepted} samples ({samples})")

        log_path = settings.store.data_dir / "worker.log"
        worker = start_worker(settings, queues=list(DEMO_METRICS), concurrency=concurrency,
                               log_path=log_path)
        stack.callback(stop_worker, worker)
        echo(f"worker started (log: {log_path})")
        run = _Run(store, started_at=started_at, tag=tag)
        done = _wait_for(run, expected=stats.jobs, worker=worker, echo=echo)

        verdicts = run.verdicts()
        echo(format_summary(summarise(verdicts)))
        dead = run.dead_letters()
        if dead:
            echo(f"{len(dead)} dead letters, e.g. {dead[0].error_class}: {dead[0].error}")
        if verdicts:
            _alert_cycle(settings, verdicts, tag=tag, command=command, echo=echo)
        return 0 if done else 1


def _alert_cycle(settings: Settings, verdicts: list[VerdictRecord], *, tag: str,
                 command: str, echo: Callable[[str], None]) -> None:
    """Replay the traffic's hours through the alert engine and say how to look closer."""
    rules_file = demo_rules_file(settings, run_tag=tag)
    alert_settings = settings.model_copy(update={"alert_rules_file": rules_file,
                                                 "alertmanager_url": None})
    times = [record.sample_ts for record in verdicts]
    echo("")
    replay = replay_alerts(alert_settings, first=min(times), last=max(times), echo=echo)
    url = settings.resolved_database_url()
    shown_url = url if settings.embedded_database else mask_url(url)
    segment = f" '{replay.shown}'" if replay.shown else ""
    echo("")
    echo("Look closer (the same data, nothing else to configure):")
    # The data folder too when the broker is the demo's own: status and the health page
    # then read its queue folder, not an empty one beside it.
    data_dir = (f" EVALFLEET_DATA_DIR='{Path(settings.store.data_dir).resolve()}'"
                if settings.embedded_broker else "")
    echo(f"  export EVALFLEET_DATABASE_URL='{shown_url}' "
         f"EVALFLEET_ALERT_RULES_FILE='{rules_file.resolve()}'{data_dir}")
    echo(f"  {command} alerts show {RULE_NAME}{segment}")
    echo(f"  {command} ui    # then open {UI_URL}/ and click the FIRING segment")
    queued = [name for name, part in settings.review.review_slice().metrics.items()
              if part.rate > 0 or any(stratum.rate > 0 for stratum in part.strata)]
    if queued:
        echo(f"  {command} review add-reviewer me    # your token, to label the "
             f"{'/'.join(sorted(queued))} verdicts queued for review at {UI_URL}/review")


def _demo_settings(settings: Settings) -> Settings:
    """Embedded defaults live in a fresh folder, so every demo run starts clean; the
    demo's own store queues its verdicts for review unless a slice is configured (a
    shared database keeps the review queue it has)."""
    if not (settings.embedded_database or settings.embedded_broker):
        return settings
    data_dir = settings.store.data_dir / "demo"
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    update: dict[str, object] = {"data_dir": data_dir}
    review = settings.review
    if settings.embedded_database and not (review.review_rates or review.review_strata):
        update["review_rates"] = DEMO_REVIEW_RATES
    return settings.model_copy(update=update)


def _tagged(lines: Iterable[tuple[int, bytes]], tag: str) -> Iterator[tuple[int, bytes]]:
    """The sample lines with ``tag`` appended to every id."""
    for number, line in lines:
        if tag and line.strip():
            record = json.loads(line)
            record["id"] = f"{record['id']}{tag}"
            record.setdefault("attributes", {})["demo_run"] = tag
            line = json.dumps(record, ensure_ascii=False).encode()
        yield number, line


class _Run:
    """This demo run's verdicts and dead letters, told apart by time and id tag."""

    def __init__(self, store: VerdictStore, *, started_at: datetime, tag: str) -> None:
        self._store, self._started_at, self._tag = store, started_at, tag

    def verdicts(self) -> list[VerdictRecord]:
        return [v for v in self._store.iter_verdicts(since=self._started_at)
                if v.key.sample_id.endswith(self._tag)]

    def dead_letters(self) -> list[DeadLetter]:
        return [d for d in self._store.iter_dead_letters()
                if d.created_at >= self._started_at and (d.sample_id or "").endswith(self._tag)]


def _wait_for(run: _Run, *, expected: int, worker: subprocess.Popen[bytes],
              echo: Callable[[str], None]) -> bool:
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while time.monotonic() < deadline:
        if len(run.verdicts()) + len(run.dead_letters()) >= expected:
            return True
        if worker.poll() is not None:
            echo(f"the worker exited early (code {worker.returncode})")
            return False
        time.sleep(0.5)
    echo(f"timed out after {DRAIN_TIMEOUT_S:.0f}s waiting for {expected} verdicts")
    return False


def _describe_database(settings: Settings) -> str:
    if settings.embedded_database:
        return f"embedded SQLite file {Path(settings.store.data_dir) / 'evalfleet.db'}"
    return mask_url(settings.resolved_database_url())


def _describe_broker(settings: Settings) -> str:
    if settings.embedded_broker:
        return f"embedded file-system broker in {settings.store.data_dir / 'broker'}"
    return mask_url(settings.resolved_broker_url())
