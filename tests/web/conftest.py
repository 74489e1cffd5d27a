"""Web page tests: an app over a real store, served by uvicorn on a free port."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from testkit.served import Served


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "browser: drives Debian's chromium through chromedriver (Selenium)")


@pytest.fixture
def serve() -> Iterator[Any]:
    """Serve apps for one test."""
    served: list[Served] = []

    def start(app: Any) -> Served:
        served.append(Served(app))
        return served[-1]

    yield start
    for item in served:
        item.stop()


from tests.evalfleet.alerts.conftest import alert_database  # noqa: E402

__all__ = ["Served", "alert_database", "serve"]
