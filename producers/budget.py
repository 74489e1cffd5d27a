"""Daily budgets at the producer: a metric near its budget gets a lower sampling rate.

Workers count what each metric costs per UTC day (:mod:`evalfleet.core.spend`); here
that spend becomes a factor on the metric's rate (:func:`evalfleet.core.budget.budget_factor`),
applied to the same id hash as every other rate, so the samples still taken are a
subset of those the full rate takes. Jobs already accepted are always judged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from evalfleet.core.budget import budget_day, budget_factor
from evalfleet.core.spend import SpendLedger

logger = logging.getLogger(__name__)

#: How long a metric's spend is reused before it is read again, in seconds.
SPEND_TTL_S = 5.0


class BudgetGate:
    """Today's share of each metric's rate, from its spend and its daily budget. Thread-safe."""

    def __init__(
        self, *, ledger: SpendLedger | None, budgets_usd: Mapping[str, float],
        soft_fraction: float, ttl_s: float = SPEND_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ledger = ledger
        self._budgets = dict(budgets_usd)
        self._soft_fraction = soft_fraction
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._factors: dict[str, tuple[float, float]] = {}

    def factor(self, metric: str) -> float:
        """The share of ``metric``'s rate to keep now (1 without a budget or a ledger)."""
        budget = self._budgets.get(metric)
        if budget is None or self._ledger is None:
            return 1.0
        now = self._clock()
        with self._lock:
            known = self._factors.get(metric)
        if known is not None and now - known[0] < self._ttl_s:
            return known[1]
        try:
            spent = self._ledger.spent(metric, day=budget_day())
        except Exception as exc:  # never block the application on a budget read
            logger.warning("cannot read the spend of %s, keeping the last known: %s", metric, exc)
            return known[1] if known is not None else 1.0
        factor = budget_factor(spent_usd=spent, budget_usd=budget,
                               soft_fraction=self._soft_fraction)
        with self._lock:
            self._factors[metric] = (now, factor)
        return factor
