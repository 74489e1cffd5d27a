"""A rate limiter for one process (the embedded default: no Redis to share budgets in)."""

from __future__ import annotations

import time
from collections.abc import Callable

from evalfleet.core.ratelimit import RateLimit
from workers.limiter.base import RateLimiter, Reservation
from workers.limiter.gcra import BURST_S, interval_for, plan, refund


class LocalRateLimiter(RateLimiter):
    """GCRA budgets in this process's memory (use from one event loop)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._tats: dict[str, float] = {}

    async def reserve(self, key: str, *, budget: RateLimit, tokens: int,
                      max_wait_s: float) -> Reservation:
        """See :meth:`RateLimiter.reserve`."""
        now = self._clock()
        plans = {
            f"{key}:rpm": plan(tat_s=self._tats.get(f"{key}:rpm"), now_s=now, cost=1,
                               interval_s=interval_for(budget.requests_per_minute),
                               burst_s=BURST_S),
            f"{key}:tpm": plan(tat_s=self._tats.get(f"{key}:tpm"), now_s=now, cost=tokens,
                               interval_s=interval_for(budget.tokens_per_minute),
                               burst_s=BURST_S),
        }
        wait_s = max(p.wait_s for p in plans.values())
        if wait_s > max_wait_s:
            return Reservation(granted=False, wait_s=wait_s)
        for name, planned in plans.items():
            self._tats[name] = planned.tat_s
        return Reservation(granted=True, wait_s=wait_s)

    async def correct(self, key: str, *, budget: RateLimit, tokens: int) -> None:
        """See :meth:`RateLimiter.correct`."""
        name = f"{key}:tpm"
        corrected = refund(tat_s=self._tats.get(name), now_s=self._clock(), units=-tokens,
                           interval_s=interval_for(budget.tokens_per_minute))
        if corrected is not None:
            self._tats[name] = corrected
