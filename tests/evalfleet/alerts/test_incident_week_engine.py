"""The simulated week of ``test_incident_week`` end to end: the engine's own cycles every
30 minutes, reading Postgres and keeping its states there, notifying a real Alertmanager
endpoint and a signed webhook. 300 segments, two planted drops: two incidents, each
named for its cause and resolved, nothing else.

The week's samples go straight into the rollups the engine sums (one minute bucket per
cycle and leaf, and its hour), as the store's triggers would have kept them: the
engine reads whole buckets only (every cycle falls on a half hour), so a week of a
300-segment rule costs one row per leaf and bucket, not one per sample.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Engine, insert

from evalfleet.alerts import AlertEngine
from evalfleet.store.rollup import OFF_GRID
from evalfleet.store.schema import score_rollups
from tests.evalfleet.alerts.receiver import Receiver
from tests.evalfleet.alerts.test_incident_week import (
    BASELINE,
    CYCLES,
    DROPS,
    FIELDS,
    GAP,
    INTERVAL,
    SPEC,
    START,
    WINDOW,
    leaf_sums,
)

SECRET = "week-secret"

#: The rule of ``test_incident_week`` evaluated every hour (its window is one hour, so
#: each window is one cycle's samples), which halves the cycles a week takes.
HOURLY = {**FIELDS, "interval": "1h", "baseline": {"type": "trailing", "window": "1d",
                                                   "gap": "1h"}}
HOUR = 2 * INTERVAL
#: Hours of the week; the first evaluated has a whole day of baseline behind it.
HOURS, FIRST = CYCLES // 2, (BASELINE + WINDOW + GAP) // 2


def write_rollups(engine: Engine, leaves: dict[Any, np.ndarray]) -> int:
    """Each leaf's hourly sums (two of ``leaf_sums``' cycles) as hour rollups."""
    rows = []
    for segment, sums in leaves.items():
        attributes = segment.as_dict()
        key = hashlib.md5(json.dumps(attributes, sort_keys=True).encode()).hexdigest()
        for hour, (n, total, total_sq) in enumerate(sums.reshape(-1, 2, 3).sum(axis=1)):
            if n:
                bucket = START + hour * HOUR
                rows.append({"metric": SPEC.metric, "name": SPEC.score, "span_s": 3600,
                             "bucket": bucket, "segment_key": key, "level": OFF_GRID,
                             "attributes": attributes, "n": int(n), "total": float(total),
                             "total_sq": float(total_sq), "first_ts": bucket})
    with engine.begin() as conn:
        conn.execute(insert(score_rollups), rows)
    return len(rows)


# 168 hourly cycles over 300 segments: about 100 s on a quiet two-core machine, 307 s at a
# load average of 10, past the suite's 300 s limit.
@pytest.mark.timeout(900)
def test_a_week_of_300_segments_through_the_engine_is_two_incidents(
    open_engine: Callable[..., AlertEngine], receiver: Receiver,
) -> None:
    hook = {"hook": {"type": "webhook", "url": receiver.url + "/hook", "default": True}}
    engine = open_engine(HOURLY, document={"receivers": hook}, alert_webhook_secret=SECRET)
    write_rollups(engine.store.engine, leaf_sums())
    events: list[tuple[datetime, str, str]] = []
    for hour in range(FIRST, HOURS):
        report = engine.check(at=START + (hour + 1) * HOUR)
        events += [(report.at, segment, event) for _, segment, event in report.events]
    fired = {segment for _, segment, event in events if event == "firing"}
    assert {segment for _, segment, event in events if event == "resolved"} == fired
    assert all(s.startswith(("app=a03", "app=a17")) for s in fired), fired

    # Alertmanager: each segment's firing and resolve, in two groups by incident.
    alerts = receiver.alerts()
    assert len(alerts) == len(events)
    groups: dict[str, set[str]] = {}
    for (_, segment, event), alert in zip(events, alerts, strict=True):  # sent in order
        assert alert["annotations"]["segment"] == segment
        groups.setdefault(alert["labels"].get("incident", "-"), set()).add(segment)
        if event == "firing":  # named for the planted cause (what is left of it resolves)
            assert alert["annotations"]["incident_cause"] == alert["labels"]["incident"]
    assert set(groups) == {"app=a03,prompt_version=v05", "app=a17"}, sorted(groups)
    for drop, (key, segments) in zip(DROPS, sorted(groups.items()), strict=True):
        assert all(s.startswith(f"app={drop.where['app']}") for s in segments)
        first = min(at for at, segment, event in events if segment in segments)
        began = START + drop.first * INTERVAL
        assert began < first <= began + 2 * HOUR, key

    # The webhook: one firing and one resolve per incident, in that order (reminders
    # between them while it lasts past ``renotify``).
    messages = [r.json for r in receiver.accepted if r.path == "/hook"]
    seen = [(m["groupLabels"]["incident"], m["alerts"][0]["annotations"]["incident_event"])
            for m in messages]
    for key in groups:
        told = [event for k, event in seen if k == key]
        assert told[0] == "firing" and told[-1] == "resolved", seen
        assert set(told[1:-1]) <= {"renotify"}, seen
        opened = next(m for m in messages if m["groupLabels"]["incident"] == key)
        notes = opened["alerts"][0]["annotations"]
        assert notes["incident_cause"] == key
        assert set(notes["incident_segments"].split(", ")) <= groups[key]
        assert float(notes["baseline_e_value"]) >= float(notes["baseline_alarm_level"])
    assert {k for k, _ in seen} == set(groups)
