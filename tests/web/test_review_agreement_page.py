"""The agreement view under /review: reviewers only, the figures review status shows, escaped."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from pydantic import SecretStr

from evalfleet.cli.ui import build_ui_app
from evalfleet.core.review_slice import MetricSlice, ReviewSlice
from evalfleet.core.settings import Settings
from evalfleet.store import open_store
from evalfleet.store.queries.review_queue import LabelValue, ReviewQueue
from tests.evalfleet.alerts.test_review_agreement import record

HOSTILE = '<script>alert(1)</script>"judge'


def test_the_agreement_view_shows_live_figures_escaped(
        database_url: str, tmp_path: Path, serve: Callable[..., Any]) -> None:
    store = open_store(database_url, review=ReviewSlice({"bbh_match": MetricSlice(rate=1.0)}))
    now = datetime.now(UTC)
    # Twenty items of a judge named in markup: it matches people on all but the first.
    store.save(verdicts=[record(n, judge=(n % 2 == 0) != (n == 0), at=now, model=HOSTILE)
                         for n in range(20)], owner="w")
    queue = ReviewQueue(store)
    for item in queue.iter_items():
        given = int(item.sample_id[1:]) % 2 == 0
        queue.label(item_id=item.id, reviewer="ann", labels={
            "correct": LabelValue(raw=given, value=float(given))}, comment=None,
            source="import", now=now, require_lease=False)
    reviewer = queue.add_reviewer("ann", now=now)
    store.close()
    settings = Settings(database_url=database_url, data_dir=tmp_path,
                        review_secret=SecretStr("s3cret-for-forms"))
    url = serve(build_ui_app(settings, token="read-only-token-123")).url

    anonymous = httpx.get(f"{url}/review/agreement", timeout=10, follow_redirects=False)
    assert anonymous.status_code == 303
    page = httpx.get(f"{url}/review/agreement", cookies={"evalfleet_reviewer": reviewer},
                     timeout=30)
    assert page.status_code == 200
    assert HOSTILE not in page.text and "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    row = page.text.split('id="agreement"', 1)[1]
    assert "<td>20</td>" in row and "accuracy 0.950 [" in row
    assert "app=bot" not in row
    split = httpx.get(f"{url}/review/agreement", params={"segment_by": "app", "days": "7"},
                      cookies={"evalfleet_reviewer": reviewer}, timeout=30)
    assert "<td>app=bot</td><td>20</td>" in split.text.split('id="agreement"', 1)[1]
    bad = httpx.get(f"{url}/review/agreement", params={"days": "<b>"}, timeout=10,
                    cookies={"evalfleet_reviewer": reviewer})
    assert bad.status_code == 400 and "<b>" not in bad.text
