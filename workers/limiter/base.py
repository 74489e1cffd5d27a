"""The rate limiter contract: reserve a request and its tokens, correct the tokens later.

Implementations: :class:`~workers.limiter.redis.RedisRateLimiter` (shared by the
fleet) and :class:`~workers.limiter.local.LocalRateLimiter` (one process, for the
embedded default). Both apply :mod:`workers.limiter.gcra`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from evalfleet.core.ratelimit import RateLimit


@dataclass(frozen=True, slots=True)
class Reservation:
    """The answer to a reservation."""

    granted: bool
    """True: send after ``wait_s``. False: nothing was reserved; come back after ``wait_s``."""

    wait_s: float


class RateLimiter(ABC):
    """Requests-per-minute and tokens-per-minute budgets per key (endpoint and model)."""

    @abstractmethod
    async def reserve(self, key: str, *, budget: RateLimit, tokens: int,
                      max_wait_s: float) -> Reservation:
        """Reserve one request and ``tokens`` tokens if that needs at most ``max_wait_s``.

        Args:
            key: Names the budget (endpoint and model).
            budget: Its limits.
            tokens: The estimated tokens of the request.
            max_wait_s: The longest wait worth holding a slot for.
        """

    @abstractmethod
    async def correct(self, key: str, *, budget: RateLimit, tokens: int) -> None:
        """Charge ``tokens`` more (negative: give back) once the real usage is known."""

    async def close(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Release connections."""
