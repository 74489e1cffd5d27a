"""``evalfleet calibrate``: send a gold set through the fleet and compare the verdicts.

The gold samples go through the real queues as ``calibration`` jobs (kept out of
alerts, dashboards and exports), under ids of their own for this run
(``calibration:<run>:<gold id>``), so every run asks the judge afresh. The command
waits until each job has become a verdict or a dead letter, compares the verdicts
with the labels, keeps the report in the store and returns it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from evalfleet.calibration.report import CalibrationReport, Judged, compare, compare_judges
from evalfleet.core.errors import InvalidInput
from evalfleet.core.gold import GoldItem, load_gold
from evalfleet.core.message import Job, new_job
from evalfleet.core.metric import Metric, load_registry
from evalfleet.core.settings import Settings
from evalfleet.localfleet import start_simulator, start_worker, stop_worker
from evalfleet.store import CalibrationRun, VerdictRecord, VerdictStore, migrate, open_store
from producers.enqueuer import Enqueuer

#: Seconds between two looks at the store while waiting for verdicts.
POLL_S = 0.5


@dataclass(frozen=True)
class CalibrationOptions:
    """What one ``evalfleet calibrate`` run does."""

    metric: str
    gold: Path
    judge_model: str | None = None
    """Judge model to calibrate (None: the one the workers would use)."""
    timeout_s: float = 600.0
    """Longest wait for the verdicts."""
    start_worker: bool = False
    """Start a worker (and, with no judge configured, the simulator) for the run."""
    seed: int = 0
    """Bootstrap seed."""


def run_calibration(settings: Settings, options: CalibrationOptions, *,
                    echo: Callable[[str], None]) -> list[CalibrationReport]:
    """Judge the gold set through the fleet and report agreement.

    Returns:
        One report per prompt version and judge model that answered.

    Raises:
        InvalidInput: The gold file has no usable record.
        TimeoutError: Not every job ended within ``timeout_s``.
    """
    metric = load_registry(settings.judge.metrics_dir).get(options.metric)
    items, errors = load_gold(options.gold, metric=metric)
    for error in errors:
        echo(f"rejected: {error}")
    if not items:
        raise InvalidInput(f"{options.gold}: no usable gold record")
    run = datetime.now(UTC)
    ids = {f"calibration:{run:%Y%m%dT%H%M%S%f}:{item.sample.id}": item for item in items}
    with ExitStack() as stack:
        if options.start_worker:
            settings = _with_local_worker(settings, stack, metric=metric, echo=echo)
        store = open_store(settings.resolved_database_url())
        stack.callback(store.close)
        if settings.embedded_database:
            migrate(store.engine)
        _send([_job(metric, item, sample_id=sample_id, judge_model=options.judge_model)
               for sample_id, item in ids.items()], settings=settings)
        echo(f"sent {len(ids)} gold samples of {options.gold.name} to queue {metric.queue}")
        judged = _wait(store, metric=metric, ids=ids, since=run, timeout_s=options.timeout_s)
        reports = compare(items, judged, metric=metric, gold=options.gold.name,
                          seed=options.seed)
        for report in reports:
            store.save_calibration(CalibrationRun(
                metric=report.metric, prompt_version=report.prompt_version,
                judge_model=report.judge_model, gold=report.gold, created_at=run,
                report=report.as_json()))
    return reports


def _with_local_worker(settings: Settings, stack: ExitStack, *, metric: Metric,
                       echo: Callable[[str], None]) -> Settings:
    if settings.judge.openai_base_url is None:
        settings = settings.model_copy(update={"openai_base_url": start_simulator(stack)})
        echo("No OPENAI_BASE_URL is set: started the judge simulator. "
             "The agreement below is the SIMULATOR's, not a real judge's.")
    log_path = settings.store.data_dir / "calibrate-worker.log"
    worker = start_worker(settings, queues=[metric.name], concurrency=16, log_path=log_path)
    stack.callback(stop_worker, worker)
    echo(f"worker started (log: {log_path})")
    return settings


def _job(metric: Metric, item: GoldItem, *, sample_id: str, judge_model: str | None) -> Job:
    sample = item.sample.model_copy(update={"id": sample_id})
    return new_job(metric.name, sample, purpose="calibration", judge_model=judge_model,
                   labels=dict(item.labels))


def _send(jobs: list[Job], *, settings: Settings) -> None:
    enqueuer = Enqueuer(settings)
    try:
        enqueuer.send_many(jobs)
    finally:
        enqueuer.close()


def _wait(store: VerdictStore, *, metric: Metric, ids: dict[str, GoldItem], since: datetime,
          timeout_s: float) -> dict[str, Judged]:
    """Each gold item's verdict, by its gold id, once every job has ended."""
    deadline = time.monotonic() + timeout_s
    while True:
        judged = {
            ids[record.key.sample_id].sample.id: _judged(record)
            for record in store.iter_verdicts(metric=metric.name, since=since,
                                              purposes=["calibration"])
            if record.key.sample_id in ids
        }
        dead = sum(1 for letter in store.iter_dead_letters(metric=metric.name, since=since)
                   if letter.sample_id in ids)
        if len(judged) + dead >= len(ids):
            return judged
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"{len(judged)} of {len(ids)} gold samples judged after {timeout_s:.0f}s: is a "
                f"worker consuming {metric.queue}? (evalfleet worker --queues {metric.name}, "
                "or evalfleet calibrate --start-worker)")
        time.sleep(POLL_S)


def compare_shadows(store: VerdictStore, *, metric: Metric, since: datetime,
                    seed: int = 0) -> list[CalibrationReport]:
    """Each shadow judge's agreement with the current judge on the samples both judged.

    Args:
        store: The verdict store.
        metric: The metric.
        since: Only verdicts created since.
        seed: Bootstrap seed.

    Returns:
        One report per shadow judge model (and prompt version).
    """
    shadows: dict[str, dict[str, Judged]] = {}
    for record in store.iter_verdicts(metric=metric.name, since=since, purposes=["shadow"]):
        shadows.setdefault(record.key.judge_model, {})[record.key.sample_id] = _judged(record)
    wanted = {sample_id for verdicts in shadows.values() for sample_id in verdicts}
    current = {record.key.sample_id: _judged(record) for record in store.iter_verdicts(
        metric=metric.name, since=since, purposes=["production"])
        if record.key.sample_id in wanted}
    return [report for verdicts in shadows.values()
            for report in compare_judges(current, verdicts, metric=metric, seed=seed)]


def _judged(record: VerdictRecord) -> Judged:
    return Judged(record.status, record.raw_scores, record.key.prompt_version,
                  record.key.judge_model)
