"""The trajectory as the pages show it: bounded, one line per step, never a failure."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from evalfleet.cli.ui import build_ui_app
from evalfleet.core.settings import Settings
from evalfleet.store import VerdictKey, migrate, open_store
from evalfleet.web.trajectory import MAX_STEPS, PART_CHARS, SUMMARY_CHARS, trajectory_view
from tests.evalfleet.store.test_sql import record


def tool(n: int, **extra: Any) -> dict[str, Any]:
    return {"type": "tool", "name": "lookup", "arguments": {"n": n}, "result": f"r{n}", **extra}


def test_steps_are_numbered_from_one_and_the_judges_step_is_marked() -> None:
    view = trajectory_view({"steps": [tool(1), tool(2, error="timeout")], "final_answer": "ok"},
                           failed_step=2)
    assert view is not None and view.problem is None
    assert [(s.number, s.kind, s.failed) for s in view.steps] == [
        (1, "tool", False), (2, "tool", True)]
    assert view.steps[1].summary == 'tool call lookup {"n": 2} -> error: timeout'
    assert [p.label for p in view.steps[1].parts] == ["arguments", "result", "error"]
    assert view.final_answer == "ok"


def test_a_long_run_shows_its_first_steps_and_counts_the_rest() -> None:
    view = trajectory_view({"steps": [tool(n) for n in range(MAX_STEPS + 25)]})
    assert view is not None and len(view.steps) == MAX_STEPS and view.more_steps == 25


def test_hostile_text_is_bounded_and_a_summary_is_one_clean_line() -> None:
    view = trajectory_view({"steps": [tool(1, result="x" * (3 * PART_CHARS)),
                                      tool(2, result="a\nb\x1b[31m\u202e" + "y" * 500)]})
    assert view is not None
    result = view.steps[0].parts[1].text
    assert len(result) < PART_CHARS + 100 and result.endswith(
        f"[... {2 * PART_CHARS:,} more characters not shown ...]")
    summary = view.steps[1].summary
    assert len(summary) <= SUMMARY_CHARS and "\n" not in summary and "\x1b" not in summary
    assert "\u202e" not in summary


@pytest.mark.parametrize("data", [
    {"steps": [{"type": "teleport"}]},
    {"steps": "not a list"},
    {"steps": [{"type": "tool"}]},
])
def test_a_trajectory_that_does_not_read_is_said_so_not_a_failure(data: Any) -> None:
    view = trajectory_view(data)
    assert view is not None and view.steps == [] and view.problem is not None
    assert view.problem.startswith("the trajectory kept with this sample does not read (steps")


def test_a_sample_without_a_trajectory_has_no_view() -> None:
    assert trajectory_view(None) is None


def test_the_verdict_page_opens_the_step_the_judge_named(tmp_path: Path,
                                                        serve: Callable[..., Any]) -> None:
    from tests.evalfleet.store.queries.test_evidence import AGENT_SAMPLE

    url = f"sqlite:///{tmp_path / 'evalfleet.db'}"
    store = open_store(url)
    migrate(store.engine)
    store.save(verdicts=[record(VerdictKey("trace-1", "agent_tool_use", "v1", "judge"),
                                scores={"tool_use": 0.1}, raw_scores={"tool_use": 0.1},
                                sample=AGENT_SAMPLE, failed_step=2)], owner="t")
    store.close()
    site = serve(build_ui_app(Settings(database_url=url, data_dir=tmp_path), token=None))
    page = httpx.get(f"{site.url}/verdicts/1", timeout=10).text
    assert re.findall(r'<li class="step step-(\w+)( failed)?" id="step-(\d)">\s*<details( open)?>',
                      page) == [("model", "", "1", ""), ("tool", " failed", "2", " open")]
    assert "the judge's failed step" in page and "<b>" not in page
    assert "&#34;city&#34;: &#34;Olso \\u001b[31m&lt;b&gt;&#34;" in page
