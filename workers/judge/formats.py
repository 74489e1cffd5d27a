"""Which constrained-output mode each judge model accepts, learnt from its refusals.

Metrics ask for ``response_format: json_schema``; many OpenAI-compatible servers
have no structured outputs (or refuse one schema feature) and answer 400, or 500 for
llama-cpp-python, whose request validation names ``response_format.type``. Such a job
is not broken: the fleet's step-down (:mod:`workers.judge.fleet`) lowers the mode for
that endpoint and model (``json_schema`` -> ``json_object`` with the schema ->
``json_object`` -> text) and sends the call again at once, and every later request to
the model uses the lower mode (:func:`shaped`).

:class:`RedisFormatSupport` shares what one worker learnt with the fleet (one
Redis hash per judge endpoint), so a refusal costs the fleet one failed call per
step, not one per worker; it re-reads the hash at most every ``refresh_s``.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import redis

from workers.verdicts.schema import MODES, ResponseFormat

logger = logging.getLogger(__name__)

#: Redis hash of one endpoint's modes by model; the suffix is a digest of the endpoint.
KEY_PREFIX = "evalfleet:response_format:"

#: Seconds between two reads of the fleet's shared modes.
REFRESH_S = 10.0

# Lower a model's mode, never raise it: two workers stepping down at once agree.
_LOWER = """
local rank = {text = 0, json_object = 1, json_object_schema = 2, json_schema = 3}
local current = redis.call('HGET', KEYS[1], ARGV[1])
if current and rank[current] and rank[current] <= rank[ARGV[2]] then return current end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return ARGV[2]
"""


def weaker(mode: ResponseFormat) -> ResponseFormat:
    """The next mode down (``text`` stays ``text``).

    Args:
        mode: A response-format mode.

    Returns:
        The mode one step weaker.
    """
    return MODES[max(0, MODES.index(mode) - 1)]


def mode_of(response_format: dict[str, Any] | None) -> ResponseFormat:
    """The mode a ``response_format`` argument asks for.

    Args:
        response_format: The argument as a request carries it, None for none.

    Returns:
        ``text`` for none, else the argument's mode.
    """
    if response_format is None:
        return "text"
    if response_format.get("type") == "json_schema":
        return "json_schema"
    return "json_object_schema" if response_format.get("schema") else "json_object"


def shaped(response_format: dict[str, Any] | None,
           mode: ResponseFormat) -> dict[str, Any] | None:
    """``response_format`` lowered to ``mode`` (never raised), keeping its schema where the
    lower mode can carry one.

    Args:
        response_format: The argument the metric asks for, None for none.
        mode: The strongest mode the judge accepts.

    Returns:
        The argument to send, or None to send none.
    """
    asked = mode_of(response_format)
    if response_format is None or MODES.index(asked) <= MODES.index(mode):
        return response_format
    if mode == "text":
        return None
    if mode == "json_object":
        return {"type": "json_object"}
    schema = (response_format.get("json_schema") or {}).get("schema")
    return {"type": "json_object", "schema": schema} if schema else {"type": "json_object"}


def endpoint_digest(base_url: str | None) -> str:
    """A short, credential-free name for a judge endpoint (host, port and path only).

    Args:
        base_url: The endpoint's base URL (``OPENAI_BASE_URL``), None for the default.

    Returns:
        16 hex characters.
    """
    parts = urlsplit(base_url or "")
    where = f"{parts.hostname or ''}:{parts.port or ''}{parts.path.rstrip('/')}"
    return hashlib.sha256(where.encode()).hexdigest()[:16]


class FormatSupport:
    """The strongest mode each model of one judge endpoint accepts, in this process.

    Args:
        ceiling: The configured mode (``EVALFLEET_JUDGE_RESPONSE_FORMAT``); never exceeded.
    """

    def __init__(self, ceiling: ResponseFormat) -> None:
        self.ceiling = ceiling
        self._modes: dict[str, ResponseFormat] = {}
        self._lock = threading.Lock()

    def mode_for(self, model: str) -> ResponseFormat:
        """The mode to request from ``model``."""
        return self._modes.get(model, self.ceiling)

    def step_down(self, model: str, *, refused: ResponseFormat) -> ResponseFormat | None:
        """Record that ``model`` refused ``refused``.

        Args:
            model: The judge model.
            refused: The mode the refused request asked for.

        Returns:
            The new, lower mode when this call lowered it; None when it was already
            lower (another call, or another worker, stepped down first).
        """
        return self._lower(model, weaker(refused))

    def _lower(self, model: str, mode: ResponseFormat) -> ResponseFormat | None:
        with self._lock:
            if MODES.index(self._modes.get(model, self.ceiling)) <= MODES.index(mode):
                return None
            self._modes[model] = mode
            return mode


class Every:
    """Says when a periodic re-read of fleet-shared state is due: on the first ask, then
    at most once per ``interval_s``.

    Args:
        interval_s: Seconds between two due answers.
        clock: Monotonic seconds (tests pass their own).
    """

    def __init__(self, interval_s: float, *, clock: Callable[[], float]) -> None:
        self._interval_s = interval_s
        self._clock = clock
        self._at: float | None = None

    def due(self) -> bool:
        """Whether to read now (the answer True starts the next interval)."""
        now = self._clock()
        if self._at is not None and now - self._at < self._interval_s:
            return False
        self._at = now
        return True


class RedisFormatSupport(FormatSupport):
    """:class:`FormatSupport` shared by the fleet through Redis.

    Args:
        ceiling: The configured mode.
        url: The Redis the fleet shares state in.
        endpoint: The judge's base URL (only a digest of its host and path is used).
        refresh_s: Seconds between reads of the shared modes.
        clock: Monotonic seconds (tests pass their own).
    """

    def __init__(self, ceiling: ResponseFormat, *, url: str, endpoint: str | None,
                 refresh_s: float = REFRESH_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(ceiling)
        self._redis: Any = redis.Redis.from_url(url, socket_timeout=2.0)
        self._script = self._redis.register_script(_LOWER)
        self._key = KEY_PREFIX + endpoint_digest(endpoint)
        self._reread = Every(refresh_s, clock=clock)

    def mode_for(self, model: str) -> ResponseFormat:
        """See :meth:`FormatSupport.mode_for`; what other workers learnt counts too."""
        if self._reread.due():
            self._merge_shared()
        return super().mode_for(model)

    def step_down(self, model: str, *, refused: ResponseFormat) -> ResponseFormat | None:
        """See :meth:`FormatSupport.step_down`; the fleet learns it too."""
        lowered = super().step_down(model, refused=refused)
        if lowered is not None:
            try:
                self._script(keys=[self._key], args=[model, lowered])
            except redis.RedisError as exc:  # this process still knows; others learn later
                logger.warning("cannot share the response format of %s: %s", model, exc)
        return lowered

    def _merge_shared(self) -> None:
        try:
            shared = self._redis.hgetall(self._key)
        except redis.RedisError as exc:
            logger.warning("cannot read the fleet's response formats: %s", exc)
            return
        for model, value in shared.items():
            mode = next((mode for mode in MODES if mode.encode() == value), None)
            if mode is not None:
                self._lower(model.decode(), mode)
