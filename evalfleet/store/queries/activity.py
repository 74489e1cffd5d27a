"""Sums of what the fleet finished in a window, per metric (``evalfleet.ops.activity``
divides them into figures).

Every query names its metrics and bounds ``created_at``, so it is a range scan of the
(metric, created_at) indexes however large the tables grow; only a metric with no
verdict in the window reads its most recent verdicts instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.engine import Connection, RowMapping

from evalfleet.store.schema import dead_letters, verdicts
from evalfleet.store.sql import SqlStore, to_utc


@dataclass(frozen=True)
class JudgeSums:
    """Sums over verdicts that a judge's cost per job is divided from."""

    n: float = 0.0
    """Verdicts."""
    single_latency_ms: float = 0.0
    """``latency_ms`` of the verdicts judged in one call (``attempts = 1``)."""
    singles: float = 0.0
    """Verdicts judged in one call."""
    latency_ms: float = 0.0
    """``latency_ms / attempts`` summed."""
    attempts: float = 0.0
    tokens: float = 0.0
    """Prompt plus completion tokens of the verdicts whose judge reports usage."""
    metered_attempts: float = 0.0
    """Attempts of the verdicts whose judge reports usage."""
    cached: float = 0.0
    """Prompt tokens served from the judge's prompt cache."""
    cache_reported: float = 0.0
    """Prompt tokens of the verdicts whose judge reports cached tokens."""

    @classmethod
    def total(cls, parts: Iterable[JudgeSums]) -> JudgeSums:
        """The sums of ``parts`` added up."""
        items = list(parts)
        return cls(**{f.name: sum(getattr(p, f.name) for p in items) for f in fields(cls)})


@dataclass(frozen=True)
class VerdictGroup:
    """The verdicts of one metric, status and error class in the window."""

    status: str
    error_class: str | None
    lag_sum_s: float
    """``created_at - sample_ts`` summed."""
    lag_max_s: float
    sums: JudgeSums


@dataclass(frozen=True)
class WindowSums:
    """One metric's finished work in a window, as stored."""

    groups: list[VerdictGroup]
    """Verdicts by status and error class; empty when the window has none."""
    dead_letters: dict[str, int]
    """Dead letters by error class."""
    recent: JudgeSums | None = None
    """The metric's most recent verdicts, read only when the window has none."""


def read_window_sums(
    store: SqlStore, *, metrics: Sequence[str], since: datetime, until: datetime,
    recent_verdicts: int,
) -> dict[str, WindowSums]:
    """The sums of each of ``metrics`` (empty ones included) over the verdicts and dead
    letters created in ``[since, until)``; for a metric with no verdict there, its
    ``recent_verdicts`` most recent verdicts are summed instead, in one connection."""
    since, until = to_utc(since), to_utc(until)
    with store.connect() as conn:
        groups = _verdict_groups(conn, store, metrics=metrics, since=since, until=until)
        letters = _dead_letter_counts(conn, metrics=metrics, since=since, until=until)
        return {metric: WindowSums(
            groups.get(metric, []), letters.get(metric, {}),
            recent=None if metric in groups else _recent_sums(conn, metric, recent_verdicts),
        ) for metric in metrics}


def count_completed(
    store: SqlStore, *, metrics: Sequence[str], since: datetime, until: datetime,
) -> dict[str, int]:
    """Jobs completed (verdicts plus dead letters created) per metric in ``[since, until)``.

    Args:
        store: The verdict store.
        metrics: The metrics to count.
        since: Start (inclusive).
        until: End (exclusive).

    Returns:
        A count per metric, zeros included.
    """
    since, until = to_utc(since), to_utc(until)
    counts = dict.fromkeys(metrics, 0)
    with store.connect() as conn:
        for table in (verdicts, dead_letters):
            c = table.c
            query = (select(c.metric, func.count())
                     .where(c.metric.in_(metrics), c.created_at >= since, c.created_at < until)
                     .group_by(c.metric))
            for metric, count in conn.execute(query):
                counts[metric] += count
    return counts


def _judge_columns(v: Any) -> list[Any]:
    """The :class:`JudgeSums` over verdict columns ``v``."""
    metered = v.prompt_tokens.is_not(None)
    single = v.attempts == 1
    return [
        func.count().label("n"),
        func.sum(case((single, v.latency_ms), else_=0)).label("single_latency_ms"),
        func.sum(case((single, 1), else_=0)).label("singles"),
        func.sum(v.latency_ms * 1.0 / func.nullif(v.attempts, 0)).label("latency_ms"),
        func.sum(v.attempts).label("attempts"),
        func.sum(v.prompt_tokens + func.coalesce(v.completion_tokens, 0)).label("tokens"),
        func.sum(case((metered, v.attempts), else_=0)).label("metered_attempts"),
        func.sum(v.cached_tokens).label("cached"),
        func.sum(case((v.cached_tokens.is_not(None), v.prompt_tokens), else_=0)).label(
            "cache_reported"),
    ]


def _sums(row: RowMapping) -> JudgeSums:
    return JudgeSums(**{f.name: float(row[f.name] or 0) for f in fields(JudgeSums)})


def _verdict_groups(
    conn: Connection, store: SqlStore, *, metrics: Sequence[str], since: datetime,
    until: datetime,
) -> dict[str, list[VerdictGroup]]:
    v = verdicts.c
    lag = store.seconds_between(v.created_at, v.sample_ts)
    query = (
        select(v.metric, v.status, v.error_class, func.sum(lag).label("lag_sum"),
               func.max(lag).label("lag_max"), *_judge_columns(v))
        .where(v.metric.in_(metrics), v.created_at >= since, v.created_at < until)
        .group_by(v.metric, v.status, v.error_class)
    )
    groups: dict[str, list[VerdictGroup]] = {}
    for row in conn.execute(query).mappings():
        groups.setdefault(row["metric"], []).append(VerdictGroup(
            row["status"], row["error_class"], lag_sum_s=float(row["lag_sum"] or 0),
            lag_max_s=float(row["lag_max"] or 0), sums=_sums(row)))
    return groups


def _recent_sums(conn: Connection, metric: str, limit: int) -> JudgeSums:
    v = verdicts.c
    recent = (select(v.latency_ms, v.attempts, v.prompt_tokens, v.completion_tokens,
                     v.cached_tokens)
              .where(v.metric == metric).order_by(v.created_at.desc())
              .limit(limit).subquery())
    return _sums(conn.execute(select(*_judge_columns(recent.c))).mappings().one())


def _dead_letter_counts(
    conn: Connection, *, metrics: Sequence[str], since: datetime, until: datetime,
) -> dict[str, dict[str, int]]:
    d = dead_letters.c
    query = (select(d.metric, d.error_class, func.count())
             .where(d.metric.in_(metrics), d.created_at >= since, d.created_at < until)
             .group_by(d.metric, d.error_class))
    found: dict[str, dict[str, int]] = {}
    for metric, error_class, count in conn.execute(query):
        found.setdefault(metric, {})[error_class] = count
    return found
