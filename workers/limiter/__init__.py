"""Rate limits per judge endpoint and model: requests and tokens per minute."""

from __future__ import annotations

from workers.limiter.base import RateLimiter, Reservation
from workers.limiter.local import LocalRateLimiter
from workers.limiter.redis import RedisRateLimiter

__all__ = ["LocalRateLimiter", "RateLimiter", "RedisRateLimiter", "Reservation"]
