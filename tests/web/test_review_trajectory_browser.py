"""An agent's trajectory on the review page, in a real browser, keyboard only.

agent_tool_use verdicts on the embedded SQLite, each trace in the review slice, with
markup in its tool results and arguments; a reviewer goes through the steps with t, j,
k and Enter, reads a tool call's arguments as indented JSON, and labels the trace.
Screenshots go under ``test-artifacts/screenshots/review-trajectory-*.png``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from evalfleet.store import VerdictKey, VerdictRecord
from evalfleet.web.trajectory import PART_CHARS
from tests.web.conftest import shot
from tests.web.test_review_browser import (
    HOSTILE,
    WAIT_S,
    ReviewSite,
    keys,
    nothing_ran,
    press_and_wait,
    served_review,
    sign_in,
)

pytestmark = pytest.mark.browser

#: The metric judged.
METRIC = "agent_tool_use"

#: A tool result long enough to be cut on the page.
LONG_RESULT = "row " * (PART_CHARS // 2)


def trajectory(n: int) -> dict[str, object]:
    """An agent that looks up the weather, then the time, then answers."""
    call = {"id": "c1", "name": "weather", "arguments": {"city": "Oslo", "units": "metric"}}
    return {
        "steps": [
            {"type": "model", "model": "m-1",
             "input": [{"role": "user", "content": f"Weather and time in Oslo? #{n}"}],
             "output": [{"role": "assistant", "content": "", "tool_calls": [call]}]},
            {"type": "tool", "name": "weather", "call_id": "c1",
             "arguments": {"city": "Oslo", "units": "metric"},
             "result": f"4 C, rain {HOSTILE}", "duration_ms": 12.5},
            {"type": "tool", "name": "clock", "call_id": "c2",
             "arguments": {"zone": f"Europe/Oslo {HOSTILE}"}, "result": LONG_RESULT,
             "error": None},
            {"type": "handoff", "agent": "writer"},
            {"type": "model", "model": "m-1", "input": [],
             "output": [{"role": "assistant", "content": f"Rain, 4 C, 10:00. {HOSTILE}"}]}],
        "tools": [{"name": "weather", "description": "Weather now",
                   "parameters": {"type": "object", "required": ["city"],
                                  "properties": {"city": {"type": "string"}}}}],
        "final_answer": f"Rain, 4 C, 10:00. {HOSTILE}"}


def verdict(n: int, now: datetime) -> VerdictRecord:
    sample_id = f"trace-{n:02d}"
    return VerdictRecord(
        key=VerdictKey(sample_id, METRIC, "v1", "judgesim"), status="ok", error_class=None,
        error=None, reason=f"weather was called well {HOSTILE}", scores={"tool_use": 0.75},
        raw_scores={"tool_use": 0.75}, raw_output="{}", attempts=1, latency_ms=5,
        prompt_tokens=None, completion_tokens=None, attributes={"app": "agent"},
        sample_ts=now, created_at=now + timedelta(seconds=n),
        sample={"input": f"Weather and time in Oslo? #{n}", "output": "Rain, 4 C, 10:00.",
                "context": [], "reference": None, "fields": {},
                "trajectory": trajectory(n)})


@pytest.fixture(scope="module")
def agent_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReviewSite]:
    now = datetime.now(UTC) - timedelta(minutes=5)
    with served_review(tmp_path_factory.mktemp("review-agents"),
                       [verdict(n, now) for n in range(3)], reviewers=("ann",)) as site:
        yield site


def focused(browser: webdriver.Chrome) -> WebElement:
    return browser.switch_to.active_element


def step_of(element: WebElement) -> str:
    """The id of the step a summary belongs to."""
    return str(element.find_element(By.XPATH, "./ancestor::li[1]").get_attribute("id"))


def test_a_reviewer_reads_the_steps_and_labels_the_trace_by_keyboard(
        browser: webdriver.Chrome, agent_site: ReviewSite) -> None:
    site = agent_site
    sign_in(browser, site, "ann")
    press_and_wait(browser, "\n")
    sample_id = browser.find_element(By.ID, "sample-id").text
    steps = browser.find_elements(By.CSS_SELECTOR, "#trajectory > li")
    assert [s.get_attribute("id") for s in steps] == [f"step-{n}" for n in range(1, 6)]
    # One line per step, every step closed.
    summaries = [s.find_element(By.TAG_NAME, "summary").text for s in steps]
    assert summaries[0] == "1 model call (m-1) asks for weather"
    assert summaries[1].startswith('2 tool call weather {"city": "Oslo", "units": "metric"} '
                                   '-> 4 C, rain <script>')
    assert summaries[3] == "4 handoff to writer"
    assert all("\n" not in text for text in summaries)
    assert not browser.find_elements(By.CSS_SELECTOR, "#trajectory details[open]")
    assert not browser.find_elements(By.ID, "sample-context")  # an agent's run: no context
    nothing_ran(browser)
    shot(browser, "review-trajectory-closed")

    # t goes to the first step; j twice to the third; Enter opens it.
    keys(browser, "t")
    assert step_of(focused(browser)) == "step-1"
    keys(browser, "jj")
    assert step_of(focused(browser)) == "step-3"
    keys(browser, "k")
    assert step_of(focused(browser)) == "step-2"
    keys(browser, "\n")
    opened = browser.find_element(By.CSS_SELECTOR, "#step-2 details")
    WebDriverWait(browser, WAIT_S, ignored_exceptions=(WebDriverException,)).until(
        lambda b: opened.get_attribute("open") is not None)
    parts = dict(zip([dt.text for dt in opened.find_elements(By.TAG_NAME, "dt")],
                     [dd.text for dd in opened.find_elements(By.TAG_NAME, "dd")], strict=True))
    assert parts["arguments"] == json.dumps({"city": "Oslo", "units": "metric"}, indent=2)
    assert parts["result"] == f"4 C, rain {HOSTILE}"
    assert parts["took"] == "12.5 ms"
    # The scoring keys do nothing while a step has the focus: still unlabelled, same item.
    keys(browser, "5")
    assert not browser.find_elements(By.CSS_SELECTOR, "input[type=radio]:checked")
    keys(browser, "j\n")  # the third step: its long result is cut on the page
    third = browser.find_element(By.CSS_SELECTOR, "#step-3 details")
    WebDriverWait(browser, WAIT_S, ignored_exceptions=(WebDriverException,)).until(
        lambda b: third.get_attribute("open") is not None)
    assert "more characters not shown" in third.text
    nothing_ran(browser)
    shot(browser, "review-trajectory-open")
    keys(browser, "\n")  # Enter again closes it
    WebDriverWait(browser, WAIT_S, ignored_exceptions=(WebDriverException,)).until(
        lambda b: third.get_attribute("open") is None)

    # Esc leaves the steps; the keys label again: tool_use 0.75 (key 4), then Enter.
    keys(browser, "\ue00c")
    assert focused(browser).tag_name == "body"
    keys(browser, "4")
    press_and_wait(browser, "\n")
    assert browser.find_element(By.ID, "reveal")
    labels = [lab for lab in site.queue.iter_labels() if lab.sample_id == sample_id]
    assert [(lab.score, lab.value) for lab in labels] == [("tool_use", 0.75)]
    nothing_ran(browser)
