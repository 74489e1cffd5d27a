"""A database that goes away under the operator tooling reads as the store's "database
unavailable", never as a SQLAlchemy error."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from evalfleet.core.errors import StoreUnavailable
from evalfleet.ops.activity import read_activity
from evalfleet.ops.dead_letter import DeadLetterFilter, count_dead_letters, iter_dead_letters
from evalfleet.store import SqlStore
from tests.helpers import database_outage

UNAVAILABLE = "the database is unavailable"


def test_dead_letters_and_status_reads_raise_the_stores_error(
    store: SqlStore, database_url: str,
) -> None:
    now = datetime.now(UTC)
    assert count_dead_letters(store, DeadLetterFilter()) == 0  # the pool holds a connection
    with database_outage(database_url):
        with pytest.raises(StoreUnavailable, match=UNAVAILABLE):
            count_dead_letters(store, DeadLetterFilter())
        with pytest.raises(StoreUnavailable, match=UNAVAILABLE):
            list(iter_dead_letters(store, DeadLetterFilter()))
        with pytest.raises(StoreUnavailable, match=UNAVAILABLE):
            read_activity(store, metrics=["rag_qa"], since=now - timedelta(minutes=5), until=now)
    assert count_dead_letters(store, DeadLetterFilter()) == 0  # and it recovers
