"""Reads behind the web page (``evalfleet ui``): overview rows, verdicts, dead letters, counts.

Each read is one or two indexed queries whose cost follows what the page shows, not
the size of the store: the overview reads ``alert_states`` and the ``alert_points``
rollup (a few rows per segment), never verdicts; a verdict is read by primary key.
Postgres and SQLite alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from evalfleet.store.schema import (
    alert_points,
    alert_states,
    dead_letters,
    verdict_samples,
    verdicts,
)
from evalfleet.store.sql import to_utc


@dataclass(frozen=True)
class StateRow:
    """One rule and segment as the overview lists it."""

    rule: str
    segment_key: str
    labels: tuple[tuple[str, str], ...]
    state: str
    since: datetime
    """When it entered its state: the last transition."""
    evaluated_at: datetime
    finding: dict[str, Any]


@dataclass(frozen=True)
class Point:
    """One evaluation's window and baseline means."""

    at: datetime
    n: int
    mean: float | None
    baseline_mean: float | None
    state: str


def load_state_rows(conn: Connection) -> list[StateRow]:
    """Every rule and segment with a stored state."""
    s = alert_states.c
    rows = conn.execute(select(s.rule, s.segment_key, s.segment, s.state, s.since,
                               s.evaluated_at, s.finding).order_by(s.rule, s.segment_key))
    return [StateRow(rule=row[0], segment_key=row[1],
                     labels=tuple((str(k), str(v)) for k, v in row[2]), state=row[3],
                     since=to_utc(row[4]), evaluated_at=to_utc(row[5]), finding=row[6] or {})
            for row in rows]


def load_points(conn: Connection, *, rule: str, since: datetime,
                segment_key: str | None = None) -> dict[str, list[Point]]:
    """The rule's evaluations since ``since`` per segment key, oldest first."""
    p = alert_points.c
    query = select(p.segment_key, p.at, p.n, p.mean, p.baseline_mean, p.state).where(
        p.rule == rule, p.at >= to_utc(since))
    if segment_key is not None:
        query = query.where(p.segment_key == segment_key)
    points: dict[str, list[Point]] = {}
    for row in conn.execute(query.order_by(p.at)):
        points.setdefault(row[0], []).append(
            Point(at=to_utc(row[1]), n=row[2], mean=row[3], baseline_mean=row[4], state=row[5]))
    return points


def load_verdict(conn: Connection, verdict_id: int) -> dict[str, Any] | None:
    """One verdict with its kept sample (``sample``: None when not kept), by row id."""
    row = conn.execute(
        select(verdicts, verdict_samples.c.sample)
        .select_from(verdicts.outerjoin(verdict_samples,
                                        verdict_samples.c.verdict_id == verdicts.c.id))
        .where(verdicts.c.id == verdict_id)).mappings().first()
    if row is None:
        return None
    found = dict(row)
    for name in ("sample_ts", "created_at"):
        found[name] = to_utc(found[name])
    return found


def load_dead_letters(conn: Connection, *, limit: int = 100) -> list[dict[str, Any]]:
    """The newest dead letters."""
    d = dead_letters.c
    rows = conn.execute(select(d.id, d.sample_id, d.metric, d.error_class, d.error, d.attempts,
                               d.payload, d.created_at, d.history)
                        .order_by(d.id.desc()).limit(limit)).mappings()
    return [{**row, "created_at": to_utc(row["created_at"])} for row in rows]


def count_by_metric(conn: Connection) -> dict[str, dict[str, int]]:
    """Per metric: verdicts ``ok`` and ``failed``, and ``dead_letters``."""
    counts: dict[str, dict[str, int]] = {}
    v = verdicts.c
    for metric, status, n in conn.execute(
            select(v.metric, v.status, func.count()).group_by(v.metric, v.status)):
        counts.setdefault(metric, {})[status] = int(n)
    d = dead_letters.c
    for metric, n in conn.execute(select(d.metric, func.count()).group_by(d.metric)):
        counts.setdefault(metric or "?", {})["dead_letters"] = int(n)
    return counts
