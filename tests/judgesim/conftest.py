"""A simulator shared by the tests of one module, reset before each test that uses it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from evalfleet.judgesim import RunningSim, SimConfig, start_in_thread


@pytest.fixture(scope="module")
def running() -> Iterator[RunningSim]:
    sim = start_in_thread(SimConfig())
    yield sim
    sim.stop()


@pytest.fixture
def judge(running: RunningSim) -> RunningSim:
    """The module's simulator, reset to the default configuration."""
    running.reset()
    running.configure(**SimConfig().as_json())
    return running
