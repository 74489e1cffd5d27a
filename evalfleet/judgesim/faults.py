"""What happens to one request: scripted reply, rate limit, random fault, latency. Pure.

Random decisions draw from a ``random.Random`` the caller owns and seeds, so
the same seed and the same request order give the same faults. The rate
window and the script hold state but take the time and the prompt as
arguments and do no I/O.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evalfleet.core.errors import InvalidInput
from evalfleet.judgesim.config import MalformedKind, SimConfig

#: What the simulator did with a request, as counted in ``by_outcome``.
Outcome = Literal[
    "ok", "malformed", "truncated", "rate_limited", "server_error", "hang", "scripted",
    "format_refused", "context_exceeded", "parameter_refused",
]

#: Every outcome, in the order they are reported.
OUTCOMES: tuple[Outcome, ...] = (
    "ok", "malformed", "truncated", "rate_limited", "server_error", "hang", "scripted",
    "format_refused", "context_exceeded", "parameter_refused",
)

#: Standard normal quantile of the 99th percentile, to fit a lognormal to (median, p99).
_Z_P99 = 2.3263478740408408

#: Length of the ``rpm_limit`` window, in seconds.
RPM_WINDOW_S = 60.0


@dataclass(frozen=True, slots=True)
class Fault:
    """The fault decided for one request; ``ok`` means an ordinary answer."""

    outcome: Outcome
    """What to do: ``ok``, ``rate_limited``, ``server_error``, ``hang``, ``malformed``
    or ``truncated`` (``scripted`` is never drawn at random)."""

    malformed_kind: MalformedKind | None = None
    """How to break the verdict, when ``outcome`` is ``malformed``."""

    @classmethod
    def none(cls) -> Fault:
        """An ordinary answer."""
        return _NO_FAULT

    @classmethod
    def malformed(cls, kind: MalformedKind) -> Fault:
        """A verdict broken in the given way."""
        return cls("malformed", kind)

    @classmethod
    def truncated(cls) -> Fault:
        """A verdict cut off mid-way."""
        return cls("truncated")


_NO_FAULT = Fault("ok")

#: Random faults and the config field holding each one's rate, in drawing order.
_FAULT_RATES: tuple[tuple[Outcome, str], ...] = (
    ("rate_limited", "rate_limit_rate"),
    ("server_error", "server_error_rate"),
    ("hang", "hang_rate"),
    ("malformed", "malformed_rate"),
    ("truncated", "truncated_rate"),
)


def decide_fault(rng: random.Random, *, config: SimConfig) -> Fault:
    """Draw the fault for one request from the configured rates.

    One uniform draw is compared with the cumulative rates in the order
    rate_limited, server_error, hang, malformed, truncated; a malformed fault
    draws its kind with a second call.

    Args:
        rng: The simulator's seeded generator.
        config: Fault rates and malformed kinds.

    Returns:
        The fault, ``Fault.none()`` for an ordinary answer.
    """
    draw = rng.random()
    for outcome, rate_field in _FAULT_RATES:
        rate: float = getattr(config, rate_field)
        if draw < rate:
            if outcome == "malformed":
                return Fault.malformed(rng.choice(config.malformed_kinds))
            return Fault(outcome)
        draw -= rate
    return _NO_FAULT


def first_answer_fault(roles: tuple[str, ...], *, config: SimConfig) -> Fault | None:
    """The fault ``first_answer_fault`` gives a request with no assistant turn yet (a
    first ask, not a re-ask); None when none applies.

    Args:
        roles: The request's message roles.
        config: The simulator's configuration.
    """
    if config.first_answer_fault is None or "assistant" in roles:
        return None
    if config.first_answer_fault == "malformed":
        return Fault.malformed(config.malformed_kinds[0])
    return Fault.truncated()


def sample_latency_ms(rng: random.Random, *, config: SimConfig) -> float:
    """Draw one request's delay from the configured distribution.

    Args:
        rng: The simulator's seeded generator.
        config: The latency distribution and its parameters.

    Returns:
        The delay in milliseconds, never negative.
    """
    if config.latency == "uniform":
        return rng.uniform(config.latency_min_ms, config.latency_max_ms)
    if config.latency == "lognormal":
        mu = math.log(config.latency_median_ms)
        sigma = lognormal_sigma(median_ms=config.latency_median_ms, p99_ms=config.latency_p99_ms)
        return rng.lognormvariate(mu, sigma) if sigma > 0 else config.latency_median_ms
    return config.latency_ms


def lognormal_sigma(*, median_ms: float, p99_ms: float) -> float:
    """The shape of the lognormal whose median and 99th percentile are given.

    Args:
        median_ms: The median, above zero.
        p99_ms: The 99th percentile, at least the median.

    Returns:
        Sigma of the underlying normal distribution.
    """
    return math.log(p99_ms / median_ms) / _Z_P99


def retry_after_header(delay_s: float) -> str:
    """The ``Retry-After`` header value for a delay: whole seconds, rounded up."""
    return str(max(0, math.ceil(delay_s - 1e-9)))


class SlidingWindow:
    """Admits at most ``limit`` requests in any ``window_s`` seconds (the ``rpm_limit``).

    Only admitted requests count against the window, as with a provider's quota.
    """

    def __init__(self, limit: int, *, window_s: float = RPM_WINDOW_S) -> None:
        self.limit = limit
        self.window_s = window_s
        self._admitted: deque[float] = deque()

    def admit(self, now_s: float) -> float | None:
        """Admit one request at time ``now_s`` if the window has room.

        Args:
            now_s: A monotonic clock reading, in seconds.

        Returns:
            None when admitted; else the seconds until the oldest admission leaves the window.
        """
        horizon = now_s - self.window_s
        while self._admitted and self._admitted[0] <= horizon:
            self._admitted.popleft()
        if len(self._admitted) < self.limit:
            self._admitted.append(now_s)
            return None
        return self._admitted[0] - horizon


class InvalidScript(InvalidInput):
    """A reply script that does not match the script format."""


class _ScriptModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScriptedReply(_ScriptModel):
    """One reply of a script rule."""

    status: int = Field(default=200, ge=200, le=599)
    """HTTP status; anything but 200 is answered with an OpenAI error body."""

    content: str | None = None
    """Reply content for a 200, sent as given (``max_tokens`` does not cut it); None for
    the simulator's own verdict for the prompt."""

    finish_reason: str = "stop"
    """``finish_reason`` of a 200."""

    retry_after: float | None = Field(default=None, ge=0)
    """Seconds sent as ``Retry-After`` (a 429 without it advertises ``retry_after_s``)."""

    delay_ms: float | None = Field(default=None, ge=0)
    """Delay before answering; None for a draw from the configured latency."""

    message: str | None = None
    """Error message of a non-200 reply."""

    code: str | None = None
    """Error code of a non-200 reply, e.g. ``insufficient_quota`` (a 429 with a code is
    sent as that error, without Retry-After)."""


class ScriptRule(_ScriptModel):
    """Replies given, in order, to requests whose prompt contains ``match``."""

    match: str
    """A substring of the prompt (the message contents, concatenated)."""

    replies: tuple[ScriptedReply, ...] = Field(min_length=1)
    """Replies, each consumed by one matching request."""

    then: Literal["repeat_last", "default"] = "default"
    """Once the replies are used up: repeat the last one, or step aside for the next
    matching rule and then the simulator's default behaviour."""


class Script:
    """The scripted replies in force: the first rule that matches and still has a reply wins."""

    def __init__(self, rules: tuple[ScriptRule, ...] = ()) -> None:
        self.rules = rules
        self._used = [0] * len(rules)

    @classmethod
    def parse(cls, data: Any) -> Script:
        """A script from its JSON form ``{"rules": [...]}``.

        Args:
            data: The decoded JSON body.

        Returns:
            The script, no reply consumed yet.

        Raises:
            InvalidScript: Naming the first bad field.
        """
        if not isinstance(data, dict) or not isinstance(data.get("rules"), list):
            raise InvalidScript("expected an object with a 'rules' list")
        try:
            rules = tuple(ScriptRule.model_validate(rule) for rule in data["rules"])
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"])
            raise InvalidScript(f"{where}: {error['msg']}" if where else error["msg"]) from None
        return cls(rules)

    def take(self, prompt_text: str) -> ScriptedReply | None:
        """Consume the next reply for a prompt.

        Args:
            prompt_text: The request's message contents, concatenated.

        Returns:
            The reply to give, or None for the simulator's default behaviour.
        """
        for index, rule in enumerate(self.rules):
            if rule.match not in prompt_text:
                continue
            used = self._used[index]
            if used < len(rule.replies):
                self._used[index] = used + 1
                return rule.replies[used]
            if rule.then == "repeat_last":
                return rule.replies[-1]
        return None
