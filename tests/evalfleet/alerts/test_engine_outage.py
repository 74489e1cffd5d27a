"""A database that goes away under the alert engine ends that cycle with the store's
"database unavailable", never a SQLAlchemy error; the next cycle runs."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from evalfleet.alerts import AlertEngine, Segment
from evalfleet.alerts.view import load_alert_view
from evalfleet.core.errors import StoreUnavailable
from tests.helpers import database_outage


def test_an_alert_cycle_raises_the_stores_error_and_the_next_one_runs(
    open_engine: Callable[..., AlertEngine], database_url: str,
) -> None:
    rule: dict[str, Any] = {"name": "faithful", "metric": "rag_qa", "score": "faithfulness",
                            "threshold": 0.5}
    engine = open_engine(rule)
    engine.check()
    with (database_outage(database_url),
          pytest.raises(StoreUnavailable, match="the database is unavailable")):
        engine.check(at=datetime.now(UTC) + timedelta(hours=1))
    with (database_outage(database_url),
          pytest.raises(StoreUnavailable, match="the database is unavailable")):
        # alerts show, the page
        load_alert_view(engine.store.engine, engine.rules.rules[0], Segment())
    assert engine.check(at=datetime.now(UTC) + timedelta(hours=2)).rows
