"""How a daily budget turns into a sampling rate. Pure.

Workers price each verdict from its token counts (:mod:`evalfleet.core.price`);
producers scale a metric's sampling rate down as the day's spend nears its budget,
so the fleet stops taking new work instead of dropping work it already accepted.
"""

from __future__ import annotations

from datetime import UTC, date, datetime


def budget_factor(*, spent_usd: float, budget_usd: float | None, soft_fraction: float) -> float:
    """The share of a metric's sampling rate to keep today.

    1 until ``soft_fraction`` of the budget is spent, then falling linearly to 0 when
    the budget is spent.

    Args:
        spent_usd: Spent so far today.
        budget_usd: The day's budget (None: no budget).
        soft_fraction: Where slowing down starts, 0..1.
    """
    if budget_usd is None:
        return 1.0
    if budget_usd <= 0 or spent_usd >= budget_usd:
        return 0.0
    soft_usd = soft_fraction * budget_usd
    if spent_usd <= soft_usd:
        return 1.0
    return (budget_usd - spent_usd) / (budget_usd - soft_usd)


def budget_day(moment: datetime | None = None) -> date:
    """The day a spend counts against (UTC)."""
    return (moment or datetime.now(UTC)).astimezone(UTC).date()
