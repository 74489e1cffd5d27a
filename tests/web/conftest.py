"""Web page tests: an app over a real store, served by uvicorn on a free port."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from testkit.served import Served
from tests.tools import require_tool

#: Debian's chromium and its driver (``apt-get install chromium chromium-driver``).
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


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


@pytest.fixture(scope="session")
def browser() -> Iterator[webdriver.Chrome]:
    """One headless chromium for the session's browser tests."""
    require_tool("chromium")
    require_tool("chromedriver")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--window-size=1300,1400", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    yield driver
    driver.quit()


def artifacts() -> Path:
    """Where screenshots go: ``test-artifacts/screenshots/`` at the repository's top (tests
    change directory to a temporary one), or under ``EVALFLEET_TEST_ARTIFACTS``."""
    default = Path(__file__).resolve().parents[2] / "test-artifacts"
    folder = Path(os.environ.get("EVALFLEET_TEST_ARTIFACTS", default)) / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def shot(browser: webdriver.Chrome, name: str) -> None:
    """Save a screenshot of the page as ``<name>.png``."""
    browser.save_screenshot(str(artifacts() / f"{name}.png"))


from tests.evalfleet.alerts.conftest import alert_database  # noqa: E402

__all__ = ["Served", "alert_database", "artifacts", "browser", "serve", "shot"]
