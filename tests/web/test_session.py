"""A conversation as the pages show it: turn by turn, the judged (last) turn marked and
open, bounded, hostile text escaped, never a failure; on the verdict page and the review
page over HTTP (the embedded SQLite store)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from evalfleet.cli.ui import build_ui_app
from evalfleet.core.review_slice import MetricSlice, ReviewSlice
from evalfleet.core.session import version_id
from evalfleet.core.settings import Settings
from evalfleet.store import VerdictKey, migrate, open_store
from evalfleet.store.queries.review_queue import ReviewQueue
from evalfleet.web.session import MAX_TURNS, session_view
from evalfleet.web.trajectory import PART_CHARS
from tests.evalfleet.store.test_sql import record

HOSTILE = '<script>alert(1)</script>"'
METRIC = "conversation_goal_completion"


def turn(n: int, **extra: Any) -> dict[str, Any]:
    return {"trace_id": f"{n:032x}", "timestamp": f"2026-11-21T10:0{n % 10}:00Z",
            "input": f"Question {n}? {HOSTILE}", "output": f"Answer {n}. {HOSTILE}",
            "context": [f"Forecast {n} {HOSTILE}"], **extra}


def session(count: int, **extra: Any) -> dict[str, Any]:
    return {"id": "conv-1", "turns": [turn(n) for n in range(1, count + 1)],
            "closed_by": "idle", **extra}


def test_turns_are_numbered_from_one_and_the_last_is_the_judged_one() -> None:
    data = session(3)
    data["turns"][1]["trajectory"] = {"steps": [
        {"type": "tool", "name": "weather", "arguments": {"city": "Oslo"}, "result": "4 C"}]}
    view = session_view(data)
    assert view is not None and view.problem is None and view.closed_by == "idle"
    assert [(t.number, t.judged) for t in view.turns] == [(1, False), (2, False), (3, True)]
    assert view.turns[0].summary == f"Question 1? {HOSTILE}"
    assert view.turns[1].trajectory is not None
    assert view.turns[1].trajectory.steps[0].summary.startswith("tool call weather")
    assert view.turns[0].trajectory is None and view.turns[2].context == [f"Forecast 3 {HOSTILE}"]


def test_a_long_conversation_shows_its_last_turns_and_counts_the_rest() -> None:
    data = session(MAX_TURNS + 7)
    data["turns"][-1]["output"] = "x" * (2 * PART_CHARS)
    view = session_view(data)
    assert view is not None and view.earlier_turns == 7 and len(view.turns) == MAX_TURNS
    assert view.turns[0].number == 8 and view.turns[-1].judged
    assert view.turns[-1].output.endswith(f"[... {PART_CHARS:,} more characters not shown ...]")


@pytest.mark.parametrize("data", [{"id": "c", "turns": "no"}, {"turns": []},
                                  {"id": "c", "turns": [{"input": "no trace id"}]}])
def test_a_session_that_does_not_read_is_said_so_not_a_failure(data: Any) -> None:
    view = session_view(data)
    assert view is not None and view.turns == [] and view.problem is not None
    assert view.problem.startswith("the session kept with this sample does not read (")


def test_a_sample_without_a_session_has_no_view() -> None:
    assert session_view(None) is None


def conversation_page_turns(page: str) -> list[tuple[str, str, str]]:
    return re.findall(r'<li class="turn( judged)?" id="turn-(\d)" value="\d">\s*<details( open)?>',
                      page)


def test_the_verdict_and_review_pages_show_the_conversation_turn_by_turn(
        tmp_path: Path, serve: Callable[..., Any]) -> None:
    url = f"sqlite:///{tmp_path / 'evalfleet.db'}"
    now = datetime.now(UTC)
    store = open_store(url, review=ReviewSlice({METRIC: MetricSlice(rate=1.0)}))
    migrate(store.engine)
    data = session(3)
    sample_id = version_id("conv-1", [t["trace_id"] for t in data["turns"]])
    sample = {"input": data["turns"][0]["input"], "output": data["turns"][-1]["output"],
              "context": [], "reference": None, "fields": {}, "session": data}
    store.save(verdicts=[record(VerdictKey(sample_id, METRIC, "v1", "judge"),
                                scores={"goal_completion": 0.25},
                                raw_scores={"goal_completion": 0.25}, sample=sample,
                                sample_ts=now, created_at=now, provisional=True)], owner="t")
    queue = ReviewQueue(store)
    token = queue.add_reviewer("ann", now=now)
    item = queue.take(reviewer="ann", now=now, lease_s=600)
    assert item is not None and item.sample_id == sample_id
    store.close()
    settings = Settings(database_url=url, data_dir=tmp_path,
                        review_secret=SecretStr("s3cret-for-forms"))
    site = serve(build_ui_app(settings, token=None))
    verdict_page = httpx.get(f"{site.url}/verdicts/1", timeout=10).text
    review_page = httpx.get(f"{site.url}/review/items/{item.id}", timeout=10,
                            cookies={"evalfleet_reviewer": token}).text
    assert 'id="provisional">not yet: a conversation version closed when idle' in verdict_page
    for page in (verdict_page, review_page):
        assert conversation_page_turns(page) == [("", "1", ""), ("", "2", ""),
                                                 (" judged", "3", " open")]
        assert "the turn judged: it closed this version" in page
        assert "3 turns; this version closed by idle" in page
        assert "<script>alert(1)" not in page
        assert "Question 2? &lt;script&gt;alert(1)&lt;/script&gt;&#34;" in page
