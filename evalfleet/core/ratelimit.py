"""The judge's rate limits for one model, fleet-wide: what the limiter enforces and what
capacity planning divides by."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RateLimit:
    """Requests and tokens per minute for one judge model across the fleet (None: no limit)."""

    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None

    @property
    def unlimited(self) -> bool:
        """True when neither limit is set."""
        return not (self.requests_per_minute or self.tokens_per_minute)
