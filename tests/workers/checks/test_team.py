"""A team's own checks from a package installed by entry point: scored in a process pool,
every failure a named result, and the pool still serving after each."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalfleet.core.metric import Metric, load_metric_file
from evalfleet.core.sample import Sample
from tests.workers.checks.builders import install_team_package
from workers.checks import CheckOutcome, CheckRunner

SAMPLE = Sample(id="req-1", output="Thank you, and please come again.")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A site folder holding the installed team package, on the path."""
    folder = install_team_package(tmp_path / "site")
    monkeypatch.syspath_prepend(str(folder))
    importlib.invalidate_caches()
    return folder


@pytest.fixture
def runner() -> Iterator[CheckRunner]:
    checks = CheckRunner(team_processes=2)
    yield checks
    checks.close()


def team_metric(tmp_path: Path, checks: dict[str, dict[str, Any]]) -> Metric:
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump({"name": "team", "kind": "check", "checks": {
        name: {"check": "team", **spec} for name, spec in checks.items()}}))
    return load_metric_file(path)


def run_all(runner: CheckRunner, metric: Metric) -> dict[str, CheckOutcome]:
    return {check.name: runner.run(check, SAMPLE) for check in runner.prepare(metric)}


def test_an_entry_point_check_scores_the_sample_on_its_scale(
    site: Path, runner: CheckRunner, tmp_path: Path,
) -> None:
    metric = team_metric(tmp_path, {
        "polite": {"entry_point": "polite"},
        "formal": {"function": "acme_checks:polite", "params": {"words": ["sir", "thank"]},
                   "scale": [0, 1]}})
    outcomes = run_all(runner, metric)
    assert outcomes["polite"].result.score == 1.0 and outcomes["polite"].scores == {"polite": 1.0}
    assert outcomes["polite"].result.reason == "uses 2 of 2 polite words"
    assert outcomes["formal"].scores == {"formal": 0.5}


def test_the_package_version_is_part_of_the_check_version(
    site: Path, tmp_path: Path,
) -> None:
    checks = {"polite": {"entry_point": "polite"}, "formal": {"function": "acme_checks:polite"}}
    metric = team_metric(tmp_path, checks)
    first = {check.name: check.version for check in CheckRunner().prepare(metric)}
    install_team_package(site, version="1.1")
    importlib.invalidate_caches()
    second = {check.name: check.version for check in CheckRunner().prepare(metric)}
    assert first.keys() == second.keys()
    assert all(first[name] != second[name] for name in first)
    assert {check.name: check.version for check in CheckRunner().prepare(metric)} == second


@pytest.mark.parametrize(("entry_point", "error_class", "error"), [
    ("raises", "check_raised", "ValueError: cannot read req-1"),
    ("sleeps", "check_timeout", "ran past its limit of 0.5 s; its process was killed"),
    ("spins", "check_timeout", "ran past its limit of 0.5 s; its process was killed"),
    ("seven", "check_off_scale", "returned 7, off its scale 0..1"),
    ("exits", "check_crashed", "its process died (exit code 3)"),
    ("missing", "check_not_found", "no entry point missing is installed"),
])
def test_a_failing_team_check_is_a_named_failure_and_the_pool_serves_on(
    site: Path, runner: CheckRunner, tmp_path: Path, entry_point: str, error_class: str,
    error: str,
) -> None:
    metric = team_metric(tmp_path, {"bad": {"entry_point": entry_point, "timeout_s": 0.5},
                                    "polite": {"entry_point": "polite"}})
    for _ in range(2):  # the second time through a fresh process
        outcomes = run_all(runner, metric)
        bad = outcomes["bad"]
        assert (bad.result.error_class, bad.result.reason) == (error_class, error + (
            "" if entry_point != "missing" else " in group evalfleet.checks"))
        assert bad.scores == {"bad": None}
        assert outcomes["polite"].result.score == 1.0


@pytest.mark.parametrize(("spec", "expected"), [
    ({"entry_point": "seven", "scale": [1, 7]}, 1.0),
    ({"entry_point": "seven", "scale": [0, 7], "binary": True}, 1.0),
    ({"entry_point": "polite", "binary": True}, 1.0),
    ({"entry_point": "polite", "scale": [0, 0.5]}, None),
    ({"entry_point": "seven", "scale": [0, 10], "binary": True}, None),
])
def test_scales_and_binary_team_checks(
    site: Path, runner: CheckRunner, tmp_path: Path, spec: dict[str, Any],
    expected: float | None,
) -> None:
    outcome = run_all(runner, team_metric(tmp_path, {"t": spec}))["t"]
    assert outcome.scores == {"t": expected}, outcome
    if expected is None:
        assert outcome.result.error_class == "check_off_scale"
