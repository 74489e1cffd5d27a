"""Fixtures of the chaos tests: a Redis server and a PostgreSQL cluster of their own (the
shared ones on the standard ports are never stopped), and a judge simulator.

Each is stopped in a ``finally`` at the end of the session, also when a test fails
or times out (pytest-timeout's signal method raises in the test, so teardown runs).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from evalfleet.judgesim import RunningSim, SimConfig, start_in_thread
from testkit.chaos.services import ChaosServices
from tests.tools import require_tool


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "chaos: kills and restarts services of its own mid-run (about a minute each)")


@pytest.fixture(scope="session")
def chaos_services() -> Iterator[ChaosServices]:
    """A Redis server (AOF on) and a PostgreSQL cluster on free ports, for this session."""
    require_tool("redis-server")
    require_tool("initdb")
    services = ChaosServices().start()
    try:
        yield services
    finally:
        services.close()


@pytest.fixture(scope="session")
def chaos_sim() -> Iterator[RunningSim]:
    """A judge simulator for the chaos runs (each run configures and resets it)."""
    sim = start_in_thread(SimConfig())
    try:
        yield sim
    finally:
        sim.stop()
