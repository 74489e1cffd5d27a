"""``evalfleet cost``: spend per metric and UTC day, read from the store."""

from __future__ import annotations

from datetime import UTC, datetime

from click.testing import CliRunner

from evalfleet.cli import main
from evalfleet.core.settings import Settings
from evalfleet.store import VerdictKey, open_store
from tests.evalfleet.store.test_sql import record


def test_cost_prints_each_days_tokens_with_the_cached_share(database_url: str) -> None:
    today = datetime.now(UTC)
    store = open_store(database_url)
    store.save(verdicts=[
        record(VerdictKey("a", "rag_qa", "v", "m"), created_at=today, cost_usd=0.002,
               prompt_tokens=1000, cached_tokens=800),
        record(VerdictKey("b", "rag_qa", "v", "m"), created_at=today, cost_usd=0.003,
               prompt_tokens=1000, cached_tokens=None),
    ], owner="w")
    store.close()
    result = CliRunner().invoke(main, ["cost", "--days", "2"],
                                env=Settings(database_url=database_url).as_environment())
    assert result.exit_code == 0, result.output
    header, row = result.output.splitlines()
    assert header.split()[3:6] == ["prompt", "tok", "cached"]
    assert row.split()[1:7] == ["rag_qa", "2", "2000", "40%", "40", "0.0050"]
