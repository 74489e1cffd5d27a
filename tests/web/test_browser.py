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
from pathlib import Path
from urllib.parse import quote, urlparse

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By

from evalfleet.cli.ui import build_ui_app
from evalfleet.core.settings import Settings
from evalfleet.localfleet import SIMULATOR_MODEL
from evalfleet.store import VerdictRecord, open_store
from evalfleet.web.app import format_number
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


def run_cli(settings: Settings, *args: str, stdin: str | None = None) -> str:
    """``evalfleet ARGS`` over the demo's store, as a person in its folder would run it."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(settings.store.data_dir),
           "EVALFLEET_DATABASE_URL": settings.resolved_database_url(),
           "EVALFLEET_ALERT_RULES_FILE": str(settings.alerts.alert_rules_file)}
    result = subprocess.run([sys.executable, "-m", "evalfleet", *args], input=stdin, env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def corrected(browser: webdriver.Chrome) -> tuple[str, str]:
    """The alert page's corrected mean and the labels behind it, as shown."""
    return (browser.find_element(By.ID, "corrected-mean").text,
            browser.find_element(By.ID, "corrected-labels").text)


def test_labels_given_on_the_demo_move_the_alert_pages_corrected_mean(
    browser: webdriver.Chrome, site: Served, fleet_store: Settings, tmp_path: Path,
) -> None:
    alert = f"{site.url}/alerts/{RULE}?segment={quote(SEGMENT)}"
    browser.get(alert)
    assert corrected(browser) == ("not enough labels", "0 labels (at least 100 needed): "
                                  "0 of 100 labels; stratum 'rest' at rate 1 has 0 of 30 labels")

    # The demo queued every rag_qa verdict; people label the segment's but one elsewhere
    # (v12 adds a claim to an answer: a quarter of it holds, they say).
    pending = [json.loads(line) for line in
               run_cli(fleet_store, "review", "pending", "--json", "--limit", "1000").splitlines()]
    wanted = dict(part.split("=") for part in SEGMENT.split(","))
    ours = [item for item in pending if item["metric"] == "rag_qa"
            and wanted.items() <= item["attributes"].items()]
    assert len(ours) >= 100 and all(item["reason"] == "random" for item in ours)
    *imported, last = ours
    lines = tmp_path / "labels.jsonl"
    lines.write_text("".join(json.dumps({"item_id": item["item_id"], "score": "faithfulness",
                                         "value": 0.25, "reviewer": "ann"}) + "\n"
                             for item in imported), "utf-8")
    run_cli(fleet_store, "review", "import", str(lines))
    browser.get(alert)
    before, labels = corrected(browser)
    assert labels == f"{len(imported)} labels (at least 100 needed)"
    assert float(before) < float(browser.find_element(By.ID, "judge-mean").text)

    # One more, given on the review page: the items queued before it are leased elsewhere,
    # so the page hands this one out next. The person says the opposite of the judge.
    waiting = [json.loads(line)["item_id"] for line in run_cli(
        fleet_store, "review", "pending", "--json", "--limit", "1000").splitlines()]
    ahead = waiting.index(last["item_id"])
    if ahead:
        run_cli(fleet_store, "review", "pending", "--lease-to", "elsewhere", "--lease", "1h",
                "--limit", str(ahead), "--json")
    judge = next(v.scores["faithfulness"] for v in _verdicts(fleet_store)
                 if v.key.sample_id == last["sample_id"] and v.key.metric == "rag_qa")
    token = run_cli(fleet_store, "review", "add-reviewer", "bea").strip()
    browser.delete_all_cookies()
    try:
        browser.get(site.url + "/review")
        browser.find_element(By.ID, "token").send_keys(token + "\n")
        browser.find_element(By.CSS_SELECTOR, "#next-form button").click()
        assert browser.find_element(By.ID, "sample-id").text == last["sample_id"]
        # Keys: 1 is 0, 5 is 1, x is "cannot say".
        said = "5" if judge is not None and judge < 0.5 else "1"
        for score, key in (("faithfulness", said), ("context_relevance", "x"),
                           ("answer_relevance", "x"), ("semantic_similarity", "x")):
            browser.find_element(
                By.CSS_SELECTOR, f"input[name='score.{score}'][data-key='{key}']").click()
        browser.find_element(By.ID, "label-submit").click()
        assert browser.find_element(By.ID, "reveal")
        browser.get(alert)
        after, labels = corrected(browser)
        shot(browser, "alert-labelled")
    finally:
        browser.delete_all_cookies()
    assert labels == f"{len(ours)} labels (at least 100 needed)"
    assert float(after) > float(before) if said == "5" else float(after) < float(before)
    # The command line says the same of the same labels, over the rule's window.
    (estimate,) = json.loads(run_cli(
        fleet_store, "review", "estimate", "--metric", "rag_qa", "--score", "faithfulness",
        *[arg for part in SEGMENT.split(",") for arg in ("--segment", part)],
        "--since", "2026-11-21T11:00Z", "--until", "2026-11-21T14:00Z", "--json"))
    assert (format_number(estimate["corrected"]["value"]), estimate["labels"]) == (
        after, len(ours))


def _verdicts(settings: Settings) -> list[VerdictRecord]:
    store = open_store(settings.resolved_database_url())
    try:
        return list(store.iter_verdicts())
    finally:
        store.close()
