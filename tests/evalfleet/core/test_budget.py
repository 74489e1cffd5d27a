"""How a daily budget scales the sampling rate."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import pytest

from evalfleet.core.budget import budget_day, budget_factor
from evalfleet.core.spend import SpendLedger


@pytest.mark.parametrize(("spent", "budget", "factor"), [
    (0, None, 1.0),
    (10, 100, 1.0),
    (80, 100, 1.0),
    (90, 100, 0.5),
    (95, 100, 0.25),
    (100, 100, 0.0),
    (150, 100, 0.0),
    (0, 0, 0.0),
])
def test_budget_factor(spent: float, budget: float | None, factor: float) -> None:
    assert budget_factor(spent_usd=spent, budget_usd=budget, soft_fraction=0.8) == (
        pytest.approx(factor))


def test_budget_day_is_utc() -> None:
    late_evening_west = datetime(2026, 11, 21, 22, 0, tzinfo=timezone(timedelta(hours=-5)))
    assert budget_day(late_evening_west) == date(2026, 11, 22)
    assert budget_day() == datetime.now(UTC).date()


def test_spend_ledger_adds_per_metric_and_day(redis_url: str) -> None:
    ledger = SpendLedger(redis_url)
    today, yesterday = date(2026, 11, 22), date(2026, 11, 21)
    ledger.add({"rag_qa": 0.25, "bbh_match": 1.0}, day=today)
    ledger.add({"rag_qa": 0.5, "bbh_match": 0.0}, day=today)
    ledger.add({"rag_qa": 9.0}, day=yesterday)
    assert ledger.spent("rag_qa", day=today) == pytest.approx(0.75)
    assert ledger.spent("bbh_match", day=today) == pytest.approx(1.0)
    assert ledger.spent("context_precision", day=today) == 0.0
    ledger.close()
