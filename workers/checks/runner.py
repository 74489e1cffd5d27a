"""Running a check metric's checks on a sample: one result per check, never an exception.

The runner prepares each metric's checks once (patterns and schemas compiled, team
functions found and versioned) and then turns a sample into one :class:`CheckOutcome`
per check: its verdict key's parts (version, ``check:<name>``), its raw and
normalised score, its reason, or the named failure that makes its verdict ``failed``.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from evalfleet.core.checkspec import LoadedCheck, Team, TrajectoryCheck
from evalfleet.core.metric import Metric, sample_value
from evalfleet.core.sample import Sample
from workers.checks import builtin, trajectory
from workers.checks.pool import TeamCheckPool
from workers.checks.result import (
    CHECK_NOT_FOUND,
    CHECK_OFF_SCALE,
    MISSING_INPUT,
    NO_TRAJECTORY,
    CheckResult,
)
from workers.checks.team import resolve, team_version

#: Team check processes per worker process (each runs one call at a time).
TEAM_CHECK_PROCESSES = min(4, os.cpu_count() or 1)


@dataclass(frozen=True)
class CheckOutcome:
    """What one check of one sample comes to."""

    check: PreparedCheck
    result: CheckResult

    @property
    def scores(self) -> dict[str, float | None]:
        """The normalised score by the check's name (null when it failed)."""
        score = self.result.score
        if score is None:
            return {self.check.name: None}
        if isinstance(score, bool):
            return {self.check.name: 1.0 if score else 0.0}
        low, high = self.check.scale
        return {self.check.name: (score - low) / (high - low)}


@dataclass(frozen=True)
class PreparedCheck:
    """A check ready to run."""

    loaded: LoadedCheck
    version: str
    """What its verdicts have for a prompt version (a team check's includes its package)."""
    run: Callable[[Sample], CheckResult]

    @property
    def name(self) -> str:
        """The check's name."""
        return self.loaded.name

    @property
    def in_process(self) -> bool:
        """Whether it runs in the worker's own thread (a built-in check, quick and
        bounded), rather than in the team check process pool."""
        return not isinstance(self.loaded.spec, Team)

    @property
    def judge_model(self) -> str:
        """What its verdicts have for a judge model: ``check:<name>``."""
        return self.loaded.judge_model

    @property
    def scale(self) -> tuple[float, float]:
        """The range of its raw score."""
        spec = self.loaded.spec
        return spec.scale if isinstance(spec, Team) else (0.0, 1.0)


class CheckRunner:
    """Runs check metrics; team checks go to a process pool started on first use."""

    def __init__(self, *, team_processes: int = TEAM_CHECK_PROCESSES) -> None:
        self._team_processes = team_processes
        self._pool: TeamCheckPool | None = None
        self._prepared: dict[tuple[str, str], list[PreparedCheck]] = {}
        self._lock = threading.Lock()

    def prepare(self, metric: Metric) -> list[PreparedCheck]:
        """``metric``'s checks, prepared once per metric version."""
        cache_key = (metric.name, metric.version)
        prepared = self._prepared.get(cache_key)
        if prepared is None:
            prepared = [self._prepare(check) for check in metric.checks]
            self._prepared[cache_key] = prepared
        return prepared

    def prepare_check(self, check: LoadedCheck) -> PreparedCheck:
        """One check, prepared once per check version (a cascade's check tier)."""
        cache_key = (f"check:{check.name}", check.version)
        prepared = self._prepared.get(cache_key)
        if prepared is None:
            prepared = [self._prepare(check)]
            self._prepared[cache_key] = prepared
        return prepared[0]

    def run(self, check: PreparedCheck, sample: Sample) -> CheckOutcome:
        """Run one check on ``sample``."""
        return CheckOutcome(check, check.run(sample))

    def close(self) -> None:
        """Stop the team check processes."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def _prepare(self, check: LoadedCheck) -> PreparedCheck:
        spec = check.spec
        if isinstance(spec, Team):
            function = resolve(spec)
            return PreparedCheck(check, team_version(check, function),
                                 self._team_run(check, spec, function.target))
        if isinstance(spec, TrajectoryCheck):
            return PreparedCheck(check, check.version, _trajectory_run(trajectory.prepare(spec)))
        run = builtin.prepare(spec, schema=check.schema)
        reference = getattr(spec, "reference", None)
        needs_reference = reference is not None and getattr(spec, "value", None) is None
        return PreparedCheck(check, check.version, _builtin_run(
            run, field=spec.field, reference=reference if needs_reference else None))

    def _team_run(self, check: LoadedCheck, spec: Team,
                  target: str | None) -> Callable[[Sample], CheckResult]:
        def run(sample: Sample) -> CheckResult:
            if target is None:
                return CheckResult.failure(CHECK_NOT_FOUND, f"no {spec.reference} is "
                                           "installed in group evalfleet.checks")
            result = self._team_pool().call(target, sample, spec.params,
                                            timeout_s=spec.timeout_s)
            return on_scale(result, spec)

        return run

    def _team_pool(self) -> TeamCheckPool:
        with self._lock:
            if self._pool is None:
                self._pool = TeamCheckPool(processes=self._team_processes)
            return self._pool


def _builtin_run(run: builtin.CheckFunction, *, field: str,
                 reference: str | None) -> Callable[[Sample], CheckResult]:
    def checked(sample: Sample) -> CheckResult:
        text = _text(sample_value(sample, field))
        if text is None:
            return CheckResult.failure(MISSING_INPUT, f"the sample has no {field}")
        expected = _text(sample_value(sample, reference)) if reference else None
        if reference and expected is None:
            return CheckResult.failure(MISSING_INPUT, f"the sample has no {reference}")
        return run(text, expected)

    return checked


def _trajectory_run(run: trajectory.TrajectoryFunction) -> Callable[[Sample], CheckResult]:
    def checked(sample: Sample) -> CheckResult:
        if sample.trajectory is None:
            return CheckResult.failure(NO_TRAJECTORY, "the sample has no trajectory")
        return run(sample.trajectory)

    return checked


def _text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


def on_scale(result: CheckResult, spec: Team) -> CheckResult:
    """A team check's answer, refused (``check_off_scale``) when its score is not on
    the check's scale: NaN, out of range, a boolean for a graded check, or neither end
    for a binary one."""
    score = result.score
    if score is None:
        return result
    low, high = spec.scale
    if isinstance(score, bool):
        if spec.binary:
            return result
        return CheckResult.failure(CHECK_OFF_SCALE, f"returned {score} for a score on "
                                   f"{low:g}..{high:g}")
    if not math.isfinite(score) or not low <= score <= high:
        return CheckResult.failure(CHECK_OFF_SCALE, f"returned {score:g}, off its scale "
                                   f"{low:g}..{high:g}")
    if spec.binary:
        if score not in (low, high):
            return CheckResult.failure(CHECK_OFF_SCALE, f"returned {score:g}; a binary "
                                       f"check returns {low:g} or {high:g}")
        return CheckResult.scored(score == high, result.reason)
    return result
