"""`/review/pending`: the slice for a labelling tool over HTTP, for reviewers' tokens only."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from pydantic import SecretStr

from evalfleet.cli.ui import build_ui_app
from evalfleet.core.review_slice import MetricSlice, ReviewSlice, Stratum
from evalfleet.core.settings import Settings
from evalfleet.store import open_store
from evalfleet.store.queries.review_queue import ReviewQueue
from tests.evalfleet.store.queries.test_review_queue import SAMPLE, record

HOSTILE = '<script>alert(1)</script>"'


def test_a_tool_lists_and_leases_the_pending_slice(
        database_url: str, tmp_path: Path, serve: Callable[..., Any]) -> None:
    now = datetime.now(UTC)
    review = ReviewSlice({"rag_qa": MetricSlice(rate=1.0, strata=(Stratum(0.5, 1.0),))})
    store = open_store(database_url, review=review)
    store.save(verdicts=[record(f"s-{i}", score=0.25 if i % 2 else 0.75, created_at=now,
                                sample_ts=now, sample={**SAMPLE, "input": HOSTILE})
                         for i in range(10)], owner="w")
    queue = ReviewQueue(store)
    token = queue.add_reviewer("labelstudio", now=now)
    settings = Settings(database_url=database_url, data_dir=tmp_path,
                        review_secret=SecretStr("s3cret-for-forms"))
    url = serve(build_ui_app(settings, token="read-only-token-123")).url
    bearer = {"Authorization": f"Bearer {token}"}

    for headers in ({}, {"Authorization": "Bearer read-only-token-123"}):
        refused = httpx.get(f"{url}/review/pending", headers=headers, timeout=10)
        assert refused.status_code == 401 and "token" in refused.json()["error"]
    listed = httpx.get(f"{url}/review/pending", headers=bearer, timeout=10)
    assert listed.status_code == 200
    assert listed.headers["content-type"].startswith("application/json")
    items = listed.json()["items"]
    assert len(items) == 10 and items[0]["sample"]["input"] == HOSTILE
    assert {(i["reason"], i["probability"], i["stratum"]) for i in items} == {
        ("random", 1.0, None), ("random", 1.0, "below 0.5")}
    page = httpx.get(f"{url}/review/pending", params={"limit": 4, "after": items[1]["item_id"]},
                     headers=bearer, timeout=10).json()["items"]
    assert [i["item_id"] for i in page] == [i["item_id"] for i in items[2:6]]
    tasks = httpx.get(f"{url}/review/pending", params={"format": "label-studio"},
                      headers=bearer, timeout=10).json()
    assert tasks[0]["data"]["item_id"] == items[0]["item_id"]
    for bad in ({"limit": "0"}, {"limit": "x"}, {"format": "<b>"}, {"after": "-1"},
                {"lease_s": "5"}, {"metric": "m" * 65}):
        answer = httpx.get(f"{url}/review/pending", params=bad, headers=bearer, timeout=10)
        assert answer.status_code == 400 and "<b>" not in answer.text, bad

    # A lease takes a bearer token: the reviewer's cookie alone (a browser's) is refused.
    cookie = httpx.post(f"{url}/review/pending/lease", cookies={"evalfleet_reviewer": token},
                        timeout=10)
    assert cookie.status_code == 401
    leased = httpx.post(f"{url}/review/pending/lease", params={"limit": 3, "lease_s": 3600},
                        headers=bearer, timeout=10).json()["items"]
    held = {i["item_id"] for i in leased}
    assert len(held) == 3 and {i["lease_owner"] for i in leased} == {"labelstudio"}
    rest = httpx.get(f"{url}/review/pending", headers=bearer, timeout=10).json()["items"]
    assert len(rest) == 7 and held.isdisjoint(i["item_id"] for i in rest)
    taken = queue.take(reviewer="ann", now=now, lease_s=60)
    assert taken is not None and taken.id not in held
    store.close()
