"""Each metric's spend per day, shared by workers (who add to it) and producers (who read it).

Kept in Redis, so every producer sees what every worker spent. Without Redis
(the embedded default) nothing is shared and budgets are not enforced.
"""

from __future__ import annotations

from datetime import date
from typing import Any

import redis

#: Prefix of the spend counters; one key per metric and UTC day.
KEY_PREFIX = "evalfleet:spend:"

#: How long a day's counter is kept, in seconds.
KEEP_S = 3 * 86_400


class SpendLedger:
    """US dollars spent per metric and day, in Redis (thread-safe)."""

    def __init__(self, url: str) -> None:
        self._redis: Any = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)

    def add(self, amounts: dict[str, float], *, day: date) -> None:
        """Add each metric's amount to its counter for ``day``."""
        pipe = self._redis.pipeline(transaction=False)
        for metric, usd in amounts.items():
            if usd:
                key = _key(metric, day)
                pipe.incrbyfloat(key, usd)
                pipe.expire(key, KEEP_S)
        pipe.execute()

    def spent(self, metric: str, *, day: date) -> float:
        """Spent on ``metric`` on ``day`` so far."""
        value = self._redis.get(_key(metric, day))
        return float(value) if value is not None else 0.0

    def close(self) -> None:
        """Release connections."""
        self._redis.close()


def _key(metric: str, day: date) -> str:
    return f"{KEY_PREFIX}{metric}:{day.isoformat()}"
