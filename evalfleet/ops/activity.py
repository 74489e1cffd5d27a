"""What the fleet finished in a recent window, read from the verdict store.

Per metric: verdicts and dead letters created in the window (by status and error
class), the verdict lag (``created_at - sample_ts``), and the judge's cost per job:
mean call latency, calls per job, tokens per call and the share of prompt tokens the
judge served from its prompt cache.

The call latency is the mean ``latency_ms`` of verdicts judged in one call
(``attempts = 1``): a verdict's ``latency_ms`` sums only the calls of its last
delivery while ``attempts`` also counts earlier failed deliveries, so
``latency_ms / attempts`` would understate it whenever jobs were retried. Only when
no verdict took a single call is ``latency_ms / attempts`` used.
A metric with no verdicts in the window takes its judge figures from its most
recent :data:`RECENT_VERDICTS` verdicts instead, so a stalled queue still gets a
worker recommendation.

Every query names its metrics and bounds ``created_at``, so it is a range scan of
the (metric, created_at) indexes however large the tables grow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.engine import Connection

from evalfleet.store.schema import dead_letters, verdicts
from evalfleet.store.sql import SqlStore, to_utc

#: Verdicts the judge figures are taken from when the window has none.
RECENT_VERDICTS = 1000


@dataclass(frozen=True)
class JudgeCost:
    """What judging one job of a metric takes, on average."""

    latency_s: float
    """One judge call, in seconds."""
    calls_per_job: float
    """Judge calls per verdict (re-asks and retried attempts included)."""
    tokens_per_call: float | None
    """Prompt plus completion tokens per call (None: the judge reports no usage)."""
    basis: str
    """Where the figures come from: ``window`` or ``recent`` verdicts, or (for a metric
    with none) the other metric on the same judge model they were taken from."""
    cached_share: float | None = None
    """Of the prompt tokens of verdicts whose judge reported cached tokens, the share
    served from its prompt cache (None: none reported)."""


@dataclass(frozen=True)
class Activity:
    """One metric's finished work in the window."""

    metric: str
    verdicts: int = 0
    """Verdicts stored (``ok`` and ``failed``)."""
    failed: dict[str, int] = field(default_factory=dict)
    """``failed`` verdicts by error class."""
    dead_letters: dict[str, int] = field(default_factory=dict)
    """Dead letters by error class."""
    lag_mean_s: float | None = None
    """Mean ``created_at - sample_ts`` of the verdicts."""
    lag_max_s: float | None = None
    """Largest lag."""
    judge: JudgeCost | None = None
    """The judge's cost per job; None when the metric has no verdicts at all."""

    @property
    def completed(self) -> int:
        """Jobs that ended in the window: verdicts plus dead letters."""
        return self.verdicts + sum(self.dead_letters.values())


def read_activity(
    store: SqlStore, *, metrics: Sequence[str], since: datetime, until: datetime,
) -> dict[str, Activity]:
    """Each metric's activity in ``[since, until)`` on creation time.

    Args:
        store: The verdict store.
        metrics: The metrics to read.
        since: Window start (inclusive).
        until: Window end (exclusive).

    Returns:
        An activity per metric, empty ones included.
    """
    since, until = to_utc(since), to_utc(until)
    with store.connect() as conn:
        found = _verdicts_in_window(conn, store, metrics=metrics, since=since, until=until)
        letters = _dead_letters_in_window(conn, metrics=metrics, since=since, until=until)
        result = {}
        for metric in metrics:
            activity = found.get(metric, Activity(metric))
            judge = activity.judge or _recent_judge_cost(conn, metric)
            result[metric] = Activity(
                metric, verdicts=activity.verdicts, failed=activity.failed,
                dead_letters=letters.get(metric, {}), lag_mean_s=activity.lag_mean_s,
                lag_max_s=activity.lag_max_s, judge=judge)
    return result


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
    """Sums that :func:`_judge_cost` divides, over verdict columns ``v``."""
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


def _verdicts_in_window(
    conn: Connection, store: SqlStore, *, metrics: Sequence[str], since: datetime,
    until: datetime,
) -> dict[str, Activity]:
    v = verdicts.c
    lag = store.seconds_between(v.created_at, v.sample_ts)
    query = (
        select(v.metric, v.status, v.error_class, func.sum(lag).label("lag_sum"),
               func.max(lag).label("lag_max"), *_judge_columns(v))
        .where(v.metric.in_(metrics), v.created_at >= since, v.created_at < until)
        .group_by(v.metric, v.status, v.error_class)
    )
    groups: dict[str, list[Any]] = {}
    for row in conn.execute(query).mappings():
        groups.setdefault(row["metric"], []).append(row)
    return {metric: _activity(metric, rows) for metric, rows in groups.items()}


def _activity(metric: str, rows: list[Any]) -> Activity:
    n = sum(row["n"] for row in rows)
    failed: dict[str, int] = {}
    for row in rows:
        if row["status"] != "ok":
            key = row["error_class"] or "unknown"
            failed[key] = failed.get(key, 0) + row["n"]
    return Activity(
        metric, verdicts=n, failed=failed,
        lag_mean_s=sum(float(row["lag_sum"] or 0) for row in rows) / n,
        lag_max_s=max(float(row["lag_max"] or 0) for row in rows),
        judge=_judge_cost(_totals(rows), basis="window"),
    )


def _totals(rows: Sequence[Any]) -> dict[str, float]:
    keys = ("n", "single_latency_ms", "singles", "latency_ms", "attempts", "tokens",
            "metered_attempts", "cached", "cache_reported")
    return {key: sum(float(row[key] or 0) for row in rows) for key in keys}


def _judge_cost(totals: dict[str, float], *, basis: str) -> JudgeCost | None:
    if not totals["n"]:
        return None
    metered, singles = totals["metered_attempts"], totals["singles"]
    latency_ms = (totals["single_latency_ms"] / singles if singles
                  else totals["latency_ms"] / totals["n"])
    return JudgeCost(
        latency_s=latency_ms / 1000.0,
        calls_per_job=totals["attempts"] / totals["n"],
        tokens_per_call=totals["tokens"] / metered if metered else None,
        basis=basis,
        cached_share=(totals["cached"] / totals["cache_reported"]
                      if totals["cache_reported"] else None),
    )


def _recent_judge_cost(conn: Connection, metric: str) -> JudgeCost | None:
    v = verdicts.c
    recent = (select(v.latency_ms, v.attempts, v.prompt_tokens, v.completion_tokens,
                     v.cached_tokens)
              .where(v.metric == metric).order_by(v.created_at.desc())
              .limit(RECENT_VERDICTS).subquery())
    row = conn.execute(select(*_judge_columns(recent.c))).mappings().one()
    return _judge_cost(_totals([row]), basis="recent")


def _dead_letters_in_window(
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
