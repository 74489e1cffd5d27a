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

The sums are read by ``evalfleet.store.queries.activity``; this module divides them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from evalfleet.store.queries.activity import (
    JudgeSums,
    VerdictGroup,
    count_completed,
    read_window_sums,
)
from evalfleet.store.sql import SqlStore

__all__ = ["RECENT_VERDICTS", "Activity", "JudgeCost", "count_completed", "read_activity"]

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
    found = read_window_sums(store, metrics=metrics, since=since, until=until,
                             recent_verdicts=RECENT_VERDICTS)
    result = {}
    for metric, sums in found.items():
        activity = _activity(metric, sums.groups) if sums.groups else Activity(metric)
        judge = activity.judge
        if judge is None and sums.recent is not None:
            judge = _judge_cost(sums.recent, basis="recent")
        result[metric] = Activity(
            metric, verdicts=activity.verdicts, failed=activity.failed,
            dead_letters=sums.dead_letters, lag_mean_s=activity.lag_mean_s,
            lag_max_s=activity.lag_max_s, judge=judge)
    return result


def _activity(metric: str, groups: list[VerdictGroup]) -> Activity:
    totals = JudgeSums.total(group.sums for group in groups)
    failed: dict[str, int] = {}
    for group in groups:
        if group.status != "ok":
            key = group.error_class or "unknown"
            failed[key] = failed.get(key, 0) + int(group.sums.n)
    return Activity(
        metric, verdicts=int(totals.n), failed=failed,
        lag_mean_s=sum(group.lag_sum_s for group in groups) / totals.n,
        lag_max_s=max(group.lag_max_s for group in groups),
        judge=_judge_cost(totals, basis="window"),
    )


def _judge_cost(totals: JudgeSums, *, basis: str) -> JudgeCost | None:
    if not totals.n:
        return None
    metered, singles = totals.metered_attempts, totals.singles
    latency_ms = totals.single_latency_ms / singles if singles else totals.latency_ms / totals.n
    return JudgeCost(
        latency_s=latency_ms / 1000.0,
        calls_per_job=totals.attempts / totals.n,
        tokens_per_call=totals.tokens / metered if metered else None,
        basis=basis,
        cached_share=totals.cached / totals.cache_reported if totals.cache_reported else None,
    )
