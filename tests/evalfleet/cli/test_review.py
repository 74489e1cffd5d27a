"""``evalfleet review status``'s default period follows the data when nothing is recent
(the demo's samples keep their dates, so its verdicts show in any month)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from evalfleet.cli.review import DEFAULT_STATUS_SPAN, default_period
from evalfleet.core.settings import Settings
from evalfleet.store import open_store
from tests.evalfleet.cli.test_boundary import run
from tests.evalfleet.ops.builders import verdict

NOW = datetime(2027, 3, 5, 9, 0, tzinfo=UTC)
OLD = datetime(2026, 11, 21, 13, 30, 27, tzinfo=UTC)


@pytest.mark.parametrize(("latest", "start", "end", "moved"), [
    (None, NOW - DEFAULT_STATUS_SPAN, NOW, False),
    (NOW - timedelta(days=2), NOW - DEFAULT_STATUS_SPAN, NOW, False),
    (NOW - DEFAULT_STATUS_SPAN, NOW - DEFAULT_STATUS_SPAN, NOW, False),
    (OLD, OLD + timedelta(seconds=1) - DEFAULT_STATUS_SPAN, OLD + timedelta(seconds=1), True),
])
def test_the_default_period(latest: datetime | None, start: datetime, end: datetime,
                            moved: bool) -> None:
    found_start, found_end, note = default_period(latest, now=NOW)
    assert (found_start, found_end) == (start, end)
    assert (note is not None) == moved
    if note:
        assert note == ("no verdict sampled in the last 30d: showing the 30d up to the "
                        "newest sample, 2026-11-21T13:30Z (--since to choose)")


def test_status_shows_old_verdicts_without_since(tmp_path: Path) -> None:
    env = {"EVALFLEET_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}"}
    assert run(env, "migrate").exit_code == 0
    # A year back: older than any 30 days before the run, whenever the test runs.
    moment = datetime.now(UTC) - timedelta(days=365)
    # Every rag_qa verdict queued for review, as in the demo's own store.
    review = Settings(review_rates={"rag_qa": 1.0}).review.review_slice()
    store = open_store(env["EVALFLEET_DATABASE_URL"], review=review)
    try:
        store.save(verdicts=[verdict(f"s{n}", created_at=moment - timedelta(hours=n))
                             for n in range(4)], owner="test")
    finally:
        store.close()
    result = run(env, "review", "status")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("no verdict sampled in the last 30d: showing the 30d up to "
                               "the newest sample, ")
    assert "what the judge says and what people would say (samples of " in result.stdout
    assert any(line.split()[:2] == ["rag_qa", "faithfulness"] for line in lines), lines
    explicit = run(env, "review", "status", "--since", "30d")
    assert "no verdict sampled" not in explicit.stdout
    assert "what the judge says" not in explicit.stdout
