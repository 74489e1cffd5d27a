"""The review page's 'label this segment': an alert segment's items first, then the queue."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from pydantic import SecretStr

from evalfleet.cli.ui import build_ui_app
from evalfleet.core.review_slice import MetricSlice, ReviewSlice
from evalfleet.core.settings import Settings
from evalfleet.store import open_store
from evalfleet.store.queries.review_queue import ReviewQueue
from evalfleet.web.review_page import review_segment
from tests.evalfleet.alerts.test_review_agreement import record


def csrf_of(html: str) -> str:
    return html.split('name="csrf" value="', 1)[1].split('"', 1)[0]


def test_review_segment_parses_the_printed_form() -> None:
    assert review_segment("prompt_version=v12,app=support-bot") == (
        {"prompt_version": "v12", "app": "support-bot"}, None)
    assert review_segment("(all)") == ({}, None) and review_segment(" ") == ({}, None)
    labels, problem = review_segment("app")
    assert labels == {} and problem is not None and "expected KEY=VALUE" in problem
    assert review_segment("a=" + "x" * 2000)[1] == "segment: at most 1024 characters"


def test_label_this_segment_takes_its_items_first(database_url: str, tmp_path: Path,
                                                  serve: Callable[..., Any]) -> None:
    store = open_store(database_url, review=ReviewSlice({"bbh_match": MetricSlice(rate=1.0)}))
    now = datetime.now(UTC)
    store.save(verdicts=[replace(record(n, judge=True, at=now),
                                 attributes={"app": "bot" if n < 5 else "support"})
                         for n in range(8)], owner="w")
    reviewer = ReviewQueue(store).add_reviewer("ann", now=now)
    store.close()
    settings = Settings(database_url=database_url, data_dir=tmp_path,
                        review_secret=SecretStr("s3cret-for-forms"))
    url = serve(build_ui_app(settings, token=None)).url
    with httpx.Client(base_url=url, timeout=30, cookies={"evalfleet_reviewer": reviewer}) as c:
        home = c.get("/review", params={"segment": "app=support"})
        assert home.status_code == 200
        assert 'id="segment-first"' in home.text and "app=support</span> first" in home.text
        taken = c.post("/review/take", data={"csrf": csrf_of(home.text)})
        assert taken.status_code == 303
        reader = open_store(database_url, pool_size=1)
        item = ReviewQueue(reader).item(int(taken.headers["location"].rsplit("/", 1)[1]))
        reader.close()
        assert item is not None and item.attributes["app"] == "support"
        # The choice stays (a cookie) until cleared; a bad one is refused, escaped.
        assert 'id="segment-first"' in c.get("/review").text
        cleared = c.get("/review", params={"segment": ""})
        assert 'id="segment-first"' not in cleared.text
        assert 'id="segment-first"' not in c.get("/review").text
        bad = c.get("/review", params={"segment": "<b>"})
        assert bad.status_code == 400 and "<b>" not in bad.text
