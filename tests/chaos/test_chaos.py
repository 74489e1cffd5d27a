"""Chaos on real services, bounded in time (issue 7, item 6).

Each scenario (``testkit/chaos/scenarios.py``) must end with every accepted sample
holding exactly one verdict or one dead letter, no verdict key stored twice, no
judge call for a verdict already stored, and no more wasted judge answers than its
disturbance explains. ``pytest -s tests/chaos`` prints the figures;
``python -m bench.chaos`` prints them as one table.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evalfleet.judgesim import RunningSim
from testkit.chaos import scenarios
from testkit.chaos.books import Figures, RunResult
from testkit.chaos.services import ChaosServices

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(180)]


def check(result: RunResult, log_dir: Path) -> None:
    """Print the run's figures and fail on any broken guarantee."""
    print(f"\n{Figures.HEADER}\n{result.figures.row()}")
    print(f"bound: extra judge calls <= {result.allowance.total}, <= "
          f"{result.allowance.per_sample} per sample: {result.allowance.reason}")
    print("\n".join(result.notes))
    broken = "\n".join(result.violations[:30])
    assert not result.violations, f"{len(result.violations)} broken:\n{broken}\nlogs: {log_dir}"


def test_sigkill_two_workers_in_turn(chaos_services: ChaosServices, chaos_sim: RunningSim,
                                     tmp_path: Path) -> None:
    check(scenarios.sigkill(chaos_services, chaos_sim, tmp_path), tmp_path)


def test_redis_killed_and_restarted_from_its_aof(
    chaos_services: ChaosServices, chaos_sim: RunningSim, tmp_path: Path,
) -> None:
    check(scenarios.redis_restart(chaos_services, chaos_sim, tmp_path), tmp_path)


def test_postgres_down_for_thirty_seconds(chaos_services: ChaosServices,
                                          chaos_sim: RunningSim, tmp_path: Path) -> None:
    check(scenarios.postgres_outage(chaos_services, chaos_sim, tmp_path), tmp_path)


@pytest.mark.timeout(420)  # the drain may wait out the breaker's doubled pauses (300 s)
def test_judge_answering_429_500_and_hanging(chaos_services: ChaosServices,
                                             chaos_sim: RunningSim, tmp_path: Path) -> None:
    result = scenarios.judge_faults(chaos_services, chaos_sim, tmp_path)
    check(result, tmp_path)
    # Both sums: the metric that may retry twice dead-letters some jobs, the other
    # (ten attempts) practically none; every job is one or the other either way.
    assert result.figures.dead_letters > 0
