"""What the alert page asks beside the engine's state and the evidence: a rule and
segment's changes of state, and a score's rollup sums per bucket for its trend
(``evalfleet.alerts.view`` shapes them; the window's and baseline's scores and the worst
samples are :mod:`evalfleet.store.queries.evidence`'s).

The trend is summed from the rollups (``evalfleet.store.rollup``): its points are whole
minutes or whole hours, so a week's trend is a few hundred rollup rows whatever the
traffic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select

from evalfleet.store.dialect import jit_off
from evalfleet.store.schema import alert_transitions, score_rollups
from evalfleet.store.sql import StoreConnection, to_utc


@dataclass(frozen=True)
class Transition:
    """One change of state of a rule and segment."""

    at: datetime
    """When."""
    previous: str
    """The state before."""
    state: str
    """The state after."""
    events: tuple[str, ...]
    """What was notified."""
    finding: dict[str, Any]
    """The evaluation's numbers."""


def state_changes(conn: StoreConnection, *, rule: str, segment_key: str,
                  limit: int) -> list[Transition]:
    """The latest ``limit`` changes of state of ``rule`` in the segment whose key is
    ``segment_key``, oldest first (the newest are the ones kept when there are more)."""
    t = alert_transitions.c
    rows = conn.execute(
        select(t.at, t.previous, t.state, t.events, t.finding)
        .where(t.rule == rule, t.segment_key == segment_key)
        .order_by(t.at.desc(), t.id.desc()).limit(limit)).all()
    # events are stored joined by commas, none for a change that notified nothing.
    return [Transition(at=to_utc(row[0]), previous=row[1], state=row[2],
                       events=tuple(e for e in row[3].split(",") if e), finding=row[4] or {})
            for row in reversed(rows)]


def rollup_sums(conn: StoreConnection, *, metric: str, score: str, span_s: int,
                start: datetime, end: datetime,
                filters: Mapping[str, Sequence[str]] = {}) -> list[tuple[datetime, int, float]]:
    """Count and sum of a score's samples per rollup bucket of ``span_s`` seconds with
    bucket starts in ``[start, end)``, over the attribute sets where each filter's key
    has one of its values; ``(bucket start, count, sum)``, buckets without samples left
    out.

    Args:
        conn: A database connection.
        metric: The metric.
        score: The stored score.
        span_s: The rollup level: 60 (minutes) or 3600 (hours).
        start: First bucket start (inclusive).
        end: Last bucket start (exclusive).
        filters: Attribute key to the values kept.
    """
    jit_off(conn)
    r = score_rollups.c
    rows = conn.execute(
        select(r.bucket, func.sum(r.n), func.sum(r.total))
        .where(r.metric == metric, r.name == score, r.span_s == span_s,
               r.bucket >= to_utc(start), r.bucket < to_utc(end),
               *(r.attributes[key].as_string().in_(list(values))
                 for key, values in filters.items()))
        .group_by(r.bucket)).all()
    return [(to_utc(bucket), int(n), float(total)) for bucket, n, total in rows]
