"""The web page in a real browser (Debian's chromium through chromedriver, Selenium),
over a store the fleet filled itself: ``evalfleet demo`` (producer, worker, judge
simulator, alert cycle) on the embedded defaults, its traffic plus hostile samples.

Each page is checked for what a person would check, and saved as a screenshot under
``test-artifacts/screenshots/`` at the repository's top (or under
``EVALFLEET_TEST_ARTIFACTS``).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from importlib import resources
from urllib.parse import urlparse

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By

from evalfleet.cli.ui import build_ui_app
from evalfleet.core.settings import Settings
from evalfleet.localfleet import SIMULATOR_MODEL
from evalfleet.store import open_store
from testkit.served import Served
from tests.web.conftest import shot

pytestmark = pytest.mark.browser

#: Sample text that would run code if it were not escaped.
HOSTILE_OUTPUT = ('<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
                  ' Our refund promise covers spaceships.')
HOSTILE_INPUT = "javascript:window.__pwned=3 <a href=\"javascript:window.__pwned=4\">click</a>"

#: The planted alert.
RULE = "support_faithfulness_drop"
SEGMENT = "prompt_version=v12,app=support-bot"


@pytest.fixture(scope="session")
def fleet_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """The demo's store: the bundled traffic and two hostile support-bot v12 samples."""
    folder = tmp_path_factory.mktemp("fleet")
    samples = folder / "samples.jsonl"
    bundled = (resources.files("evalfleet.demo") / "samples.jsonl").read_text("utf-8")
    hostile = [{"id": f"hostile-{n}", "timestamp": f"2026-11-21T13:5{n}:00Z",
                "input": HOSTILE_INPUT, "output": HOSTILE_OUTPUT,
                "context": ["Refunds are accepted within 30 days."],
                "attributes": {"app": "support-bot", "route": "/chat", "model": "m-2026-11",
                               "prompt_version": "v12"}} for n in (1, 2)]
    samples.write_text(bundled + "".join(json.dumps(h) + "\n" for h in hostile), "utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "evalfleet", "demo", "--samples", str(samples)], cwd=folder,
        capture_output=True, text=True, timeout=300,
        env={"PATH": "/usr/bin:/bin", "HOME": str(folder)})
    assert result.returncode == 0, result.stdout + result.stderr
    data = folder / ".evalfleet" / "demo"
    yield Settings(data_dir=data, database_url=f"sqlite:///{data / 'evalfleet.db'}",
                   alert_rules_file=data / "demo-rules.yaml")


@pytest.fixture(scope="session")
def site(fleet_store: Settings) -> Iterator[Served]:
    served = Served(build_ui_app(fleet_store, token=None))
    yield served
    served.stop()


def nothing_ran(browser: webdriver.Chrome) -> None:
    """No script element, no image, no javascript: link, and nothing set by sample text."""
    assert browser.execute_script("return window.__pwned === undefined")
    assert browser.execute_script("return document.scripts.length") == 0
    assert browser.execute_script("return document.images.length") == 0
    hrefs = [a.get_attribute("href") or "" for a in browser.find_elements(By.TAG_NAME, "a")]
    assert all(urlparse(href).scheme == "http" for href in hrefs), hrefs


def test_overview_marks_the_firing_segment(browser: webdriver.Chrome, site: Served) -> None:
    browser.get(site.url + "/")
    shot(browser, "overview")
    firing = browser.find_elements(By.CSS_SELECTOR, "tr.row-firing")
    segments = [row.find_element(By.CSS_SELECTOR, "a.segment").text for row in firing]
    assert SEGMENT in segments
    badge = firing[0].find_element(By.CSS_SELECTOR, ".badge")
    assert badge.text == "FIRING"
    assert badge.value_of_css_property("background-color") == "rgba(198, 40, 40, 1)"
    assert browser.find_elements(By.CSS_SELECTOR, "tr.row-firing svg.spark polyline.window")
    nothing_ran(browser)


def test_from_the_alert_to_the_failing_samples_and_why_in_two_clicks(
    browser: webdriver.Chrome, site: Served,
) -> None:
    browser.get(site.url + "/")
    row = next(r for r in browser.find_elements(By.CSS_SELECTOR, "tr.row-firing")
               if r.find_element(By.CSS_SELECTOR, "a.segment").text == SEGMENT)
    row.find_element(By.CSS_SELECTOR, "a.segment").click()  # click 1: the alert
    assert browser.find_element(By.ID, "state").text == "FIRING"
    assert float(browser.find_element(By.ID, "window-mean").text) < float(
        browser.find_element(By.ID, "baseline-mean").text)
    samples = browser.find_elements(By.CSS_SELECTOR, "li.sample")
    assert samples, "no worst samples shown"
    first = samples[0]
    worst_id = first.find_element(By.CSS_SELECTOR, "a.verdict-link").text
    reason = first.find_element(By.CSS_SELECTOR, ".reason").text
    assert "not supported by the context" in reason
    hostile = next(s for s in samples if "hostile-" in s.text)
    assert hostile.find_element(By.CSS_SELECTOR, ".output").text == HOSTILE_OUTPUT
    assert hostile.find_element(By.CSS_SELECTOR, ".input").text == HOSTILE_INPUT
    assert browser.find_elements(By.CSS_SELECTOR, "rect.bar-window")
    shot(browser, "alert")
    nothing_ran(browser)
    first.find_element(By.CSS_SELECTOR, "a.verdict-link").click()  # click 2: the verdict
    assert browser.find_element(By.ID, "sample-id").text == worst_id
    assert "not supported by the context" in browser.find_element(By.ID, "reason").text
    assert browser.find_element(By.ID, "raw-output").text.strip().startswith("{")
    assert browser.find_element(By.ID, "sample-output").text
    shot(browser, "verdict")
    nothing_ran(browser)


def test_a_hostile_sample_is_shown_as_text_on_its_verdict_page(
    browser: webdriver.Chrome, site: Served,
) -> None:
    browser.get(site.url + "/alerts/" + RULE + "?segment=" + SEGMENT.replace("=", "%3D"))
    link = next(a for a in browser.find_elements(By.CSS_SELECTOR, "a.verdict-link")
                if a.text.startswith("hostile-"))
    link.click()
    assert browser.find_element(By.ID, "sample-output").text == HOSTILE_OUTPUT
    assert browser.find_element(By.ID, "sample-input").text == HOSTILE_INPUT
    shot(browser, "verdict-hostile")
    nothing_ran(browser)


def test_trend_dead_letters_and_health(browser: webdriver.Chrome, site: Served) -> None:
    browser.get(site.url + "/")
    row = next(r for r in browser.find_elements(By.CSS_SELECTOR, "tr.row-firing")
               if r.find_element(By.CSS_SELECTOR, "a.segment").text == SEGMENT)
    row.find_element(By.LINK_TEXT, "trend").click()
    assert SEGMENT in browser.find_element(By.TAG_NAME, "h1").text
    assert browser.find_elements(By.CSS_SELECTOR, "svg.trend circle.dot")
    assert browser.find_elements(By.CSS_SELECTOR, "svg.trend line.marker-firing")
    axis = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "svg.trend text.axis")]
    assert axis[:5] == ["0", "0.25", "0.5", "0.75", "1"]
    times = [label for label in axis[5:] if re.fullmatch(r"(\d\d-\d\d )?\d\d:\d\d", label)]
    assert len(times) >= 3 and times == axis[5:]
    shot(browser, "trend")
    nothing_ran(browser)
    for path, name, heading in (("/dead-letters", "dead-letters", "Dead letters"),
                                ("/health", "health", "Fleet health")):
        browser.get(site.url + path)
        assert browser.find_element(By.TAG_NAME, "h1").text == heading
        shot(browser, name)
        nothing_ran(browser)
    coverage = browser.find_element(By.XPATH, "//td[text()='rag_qa']/..").text
    assert "rag_qa" in coverage


def test_the_demo_names_the_simulator_as_its_judge(fleet_store: Settings) -> None:
    store = open_store(fleet_store.resolved_database_url())
    try:
        models = {record.key.judge_model for record in store.iter_verdicts()}
    finally:
        store.close()
    assert models == {SIMULATOR_MODEL}
