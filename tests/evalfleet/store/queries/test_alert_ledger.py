"""The alert states and points read back as written, on both stores (Postgres writes
them as one JSON document through ``jsonb_to_recordset``, SQLite row by row)."""

from __future__ import annotations

import math
from datetime import timedelta

from sqlalchemy import select

from evalfleet.store import SqlStore
from evalfleet.store.queries.alert_ledger import (
    AlertStateRow,
    keep_points,
    read_alert_states,
    write_alert_states,
)
from evalfleet.store.schema import alert_points
from evalfleet.store.sql import to_utc
from tests.evalfleet.ops.builders import NOW


def state(key: str, **changes: object) -> AlertStateRow:
    fields: dict[str, object] = {
        "rule": "drop", "segment_key": key,
        # Labels are sample attributes: hostile text travels inside the JSON document.
        "segment": [["app", "a'\"); DROP TABLE alert_states; --\u202e"]],
        "state": "firing", "since": NOW, "breaches": 3, "clears": 0,
        "breach_started_at": NOW - timedelta(minutes=2), "fired_at": NOW,
        "notified_at": None, "transitions": 1, "announced": True, "evaluated_at": NOW,
        "finding": {"n": 12, "mean": 0.125, "tests": [], "note": "ü\n\\"},
        "detector": {"baseline": {"read_until": 1.5, "updates": 2, "bets": [[0.0, None]]}}}
    fields.update(changes)
    return AlertStateRow(**fields)  # type: ignore[arg-type]


def test_states_read_back_as_written_and_replace_the_old(any_store: SqlStore) -> None:
    first = [state("k1"), state("k2", detector=None, fired_at=None, state="ok")]
    later = [state("k1", breaches=4, evaluated_at=NOW + timedelta(minutes=1),
                   finding={"n": 13, "mean": None})]
    with any_store.engine.begin() as conn:
        write_alert_states(conn, first)
        write_alert_states(conn, later)
    with any_store.engine.connect() as conn:
        found = read_alert_states(conn, "drop")
        alone = read_alert_states(conn, "drop", segment_key="k2")
    assert found == [later[0], first[1]]
    assert alone == [first[1]]


def test_points_are_kept_once_and_old_ones_dropped(any_store: SqlStore) -> None:
    point = {"segment_key": "k1", "n": 3, "mean": 0.5, "baseline_n": None,
             "baseline_mean": None, "state": "ok"}
    with any_store.engine.begin() as conn:
        keep_points(conn, rule="drop", at=NOW - timedelta(days=3), points=[point],
                    drop_before=NOW - timedelta(days=5))
        keep_points(conn, rule="drop", at=NOW, points=[point, {**point, "segment_key": "k2",
                                                             "mean": math.nan}],
                    drop_before=NOW - timedelta(days=2))
        keep_points(conn, rule="drop", at=NOW, points=[{**point, "n": 99}],
                    drop_before=NOW - timedelta(days=2))
    with any_store.engine.connect() as conn:
        rows = conn.execute(select(alert_points.c.segment_key, alert_points.c.at,
                                   alert_points.c.n, alert_points.c.mean)
                            .order_by(alert_points.c.segment_key)).all()
    assert [(key, to_utc(at), n) for key, at, n, _ in rows] == [("k1", NOW, 3), ("k2", NOW, 3)]
    assert rows[0][3] == 0.5
    # A NaN mean is a float column's value on Postgres (SQLite keeps no NaN: null).
    assert math.isnan(rows[1][3]) if any_store.engine.dialect.name == "postgresql" else \
        rows[1][3] is None
