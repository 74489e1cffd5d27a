"""The sampling config reloads on change, at most once a second, keeping the last good one."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from evalfleet.core.errors import InvalidSamplingConfig
from producers.policy import Fallbacks
from producers.reloader import PolicyReloader


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def write(path: Path, text: str, *, mtime_ns: int) -> None:
    path.write_text(text)
    os.utime(path, ns=(mtime_ns, mtime_ns))


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Clock, list[str], PolicyReloader]:
    path = tmp_path / "sampling.yaml"
    write(path, "metrics: {rag_qa: {rate: 0.1}}", mtime_ns=1_000_000_000)
    clock, results = Clock(), []
    reloader = PolicyReloader(path, fallbacks=Fallbacks(), known_metrics=["rag_qa", "bbh_match"],
                              clock=clock, on_reload=results.append)
    return path, clock, results, reloader


def rate(reloader: PolicyReloader) -> float:
    return reloader.current().rule_for("rag_qa").rate


def test_reloads_a_changed_file_at_most_once_a_second(
    setup: tuple[Path, Clock, list[str], PolicyReloader],
) -> None:
    path, clock, results, reloader = setup
    assert rate(reloader) == 0.1
    write(path, "metrics: {rag_qa: {rate: 0.2}}", mtime_ns=2_000_000_000)
    clock.now = 0.5
    assert rate(reloader) == 0.1  # not looked at yet
    clock.now = 1.0
    assert rate(reloader) == 0.2
    assert results == ["ok"]
    clock.now = 2.5
    assert rate(reloader) == 0.2 and results == ["ok"]  # unchanged: not read again


def test_an_invalid_version_keeps_the_last_good_one_and_is_logged_once(
    setup: tuple[Path, Clock, list[str], PolicyReloader], caplog: pytest.LogCaptureFixture,
) -> None:
    path, clock, results, reloader = setup
    write(path, "metrics: {rag_qa: {rate: 7}}", mtime_ns=2_000_000_000)
    with caplog.at_level(logging.ERROR):
        for step in range(1, 5):
            clock.now = float(step)
            assert rate(reloader) == 0.1
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "previous one stays in effect" in errors[0].getMessage()
    assert "metrics.rag_qa.rate" in errors[0].getMessage()
    assert results == ["invalid"]
    write(path, "metrics: {rag_qa: {rate: 0.3}}", mtime_ns=3_000_000_000)
    clock.now = 6.0
    assert rate(reloader) == 0.3 and results == ["invalid", "ok"]


def test_a_missing_file_keeps_the_last_good_one(
    setup: tuple[Path, Clock, list[str], PolicyReloader],
) -> None:
    path, clock, results, reloader = setup
    path.unlink()
    clock.now = 1.0
    assert rate(reloader) == 0.1
    clock.now = 2.0
    assert rate(reloader) == 0.1
    assert results == ["invalid"]


def test_invalid_or_missing_at_start_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidSamplingConfig, match="cannot read"):
        PolicyReloader(tmp_path / "nope.yaml", fallbacks=Fallbacks())
    bad = tmp_path / "bad.yaml"
    bad.write_text("metrics: {unknown: {}}")
    with pytest.raises(InvalidSamplingConfig, match="unknown metric"):
        PolicyReloader(bad, fallbacks=Fallbacks(), known_metrics=["rag_qa"])


def test_no_file_means_the_defaults() -> None:
    reloader = PolicyReloader(None, fallbacks=Fallbacks(rate=0.4))
    assert reloader.current().rule_for("x").rate == 0.4
