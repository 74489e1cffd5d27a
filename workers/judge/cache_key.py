"""Which judge models accept ``prompt_cache_key``, learnt from their refusals.

Workers send ``prompt_cache_key`` (one per metric and prompt version) so a provider
routes a metric's calls, which share a long fixed prefix, to the same prompt cache.
OpenAI reads it; most OpenAI-compatible servers ignore an unknown parameter, but some
refuse it (Azure OpenAI answers 400 "Unrecognized request argument supplied", a server
whose request validation forbids extra fields answers 400, 422 or 500 naming it). Such a
call is not broken: the fleet's ``prompt_cache_key`` concern
(:class:`~workers.judge.gate.CacheKeyDrop`) drops the parameter for that endpoint and
model and sends the call again at once, and every later call to the model goes without it.

:class:`RedisCacheKeySupport` shares what one worker learnt with the fleet (one Redis set
of refusing models per judge endpoint), so a refusal costs the fleet about one failed
call, not one per worker; it re-reads the set at most every ``refresh_s``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from workers.judge.formats import REFRESH_S, Every, endpoint_digest

logger = logging.getLogger(__name__)

#: Redis set of one endpoint's models that refuse the parameter; the suffix is a digest
#: of the endpoint.
KEY_PREFIX = "evalfleet:prompt_cache_key_refused:"


class CacheKeySupport:
    """The models of one judge endpoint that refuse ``prompt_cache_key``, in this process."""

    def __init__(self) -> None:
        self._refused: set[str] = set()
        self._lock = threading.Lock()

    def accepts(self, model: str) -> bool:
        """Whether to send ``prompt_cache_key`` to ``model`` (until it refused one)."""
        return model not in self._refused

    def refuse(self, model: str) -> bool:
        """Record that ``model`` refused the parameter.

        Args:
            model: The judge model.

        Returns:
            True when this call learnt it; False when it was known (another call, or
            another worker, saw the refusal first).
        """
        with self._lock:
            if model in self._refused:
                return False
            self._refused.add(model)
            return True


class RedisCacheKeySupport(CacheKeySupport):
    """:class:`CacheKeySupport` shared by the fleet through Redis.

    Args:
        url: The Redis the fleet shares state in.
        endpoint: The judge's base URL (only a digest of its host and path is used).
        refresh_s: Seconds between reads of the shared set.
        clock: Monotonic seconds (tests pass their own).
    """

    def __init__(self, *, url: str, endpoint: str | None, refresh_s: float = REFRESH_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._redis: Any = redis.Redis.from_url(url, socket_timeout=2.0)
        self._key = KEY_PREFIX + endpoint_digest(endpoint)
        self._reread = Every(refresh_s, clock=clock)

    def accepts(self, model: str) -> bool:
        """See :meth:`CacheKeySupport.accepts`; what other workers learnt counts too."""
        if self._reread.due():
            self._merge_shared()
        return super().accepts(model)

    def refuse(self, model: str) -> bool:
        """See :meth:`CacheKeySupport.refuse`; the fleet learns it too."""
        learnt = super().refuse(model)
        if learnt:
            try:
                self._redis.sadd(self._key, model)
            except redis.RedisError as exc:  # this process still knows; others learn later
                logger.warning("cannot share that %s refuses prompt_cache_key: %s", model, exc)
        return learnt

    def _merge_shared(self) -> None:
        try:
            shared = self._redis.smembers(self._key)
        except redis.RedisError as exc:
            logger.warning("cannot read the fleet's prompt_cache_key refusals: %s", exc)
            return
        for model in shared:
            super().refuse(model.decode())
