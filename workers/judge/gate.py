"""The fleet's concerns around one judge call, each a layer: concurrency, the endpoint's
circuit breaker, the response-format step-down, dropping a refused ``prompt_cache_key``,
the fleet's rate budget and its cap on calls in flight.

A layer is called with the request and the next step (``send``) and returns what the
call ended with: the reply or a :class:`~evalfleet.core.errors.JudgeError` (never
raised). :class:`~workers.judge.fleet.JudgeFleet` chains them in one order,
:data:`~workers.judge.fleet.FLEET_ORDER`, around any provider; no layer knows which
provider is inside. All run on the fleet's one event loop.

A call a layer will not send now (its circuit is open, it would wait longer than
``max_wait_s`` for rate budget) comes back as
:class:`~evalfleet.core.errors.JudgeDeferred`, so its job goes back to the queue instead
of holding a slot.

Rate budget: a limiter that cannot be reached (its Redis down) does not stop judging:
the call goes unpaced and the judge's own 429s pace the fleet. Running out of
connections to that Redis is not an outage: the limiter's pool makes the call wait for
one (see :mod:`workers.limiter.redis`). Unpaced calls at start-up, when 128 calls at
once found the pool empty, were what took the fleet to 123% of its limit. A call that
wakes up more than :data:`LATE_S` after its slot (a busy machine: the loop did not get
the CPU in time) takes a fresh slot instead of going out in the next one's: late calls
landing on top of punctual ones put 211 requests in a 10 s window of 200 on a loaded
2-core machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import ClassVar

from evalfleet.core.errors import JudgeDeferred, JudgeError, JudgeUnavailable
from evalfleet.core.ratelimit import RateLimit
from evalfleet.core.tokens import prompt_tokens
from workers.breaker import CircuitBreaker
from workers.judge.base import JudgeReply, JudgeRequest
from workers.judge.cache_key import CacheKeySupport
from workers.judge.formats import FormatSupport, mode_of, shaped
from workers.judge.http_status import refuses_prompt_cache_key, refuses_response_format
from workers.limiter import RateLimiter
from workers.limiter.slots import LocalSlots, Report, Slots

logger = logging.getLogger(__name__)

#: Seconds after its slot a call may still go out on it; later, it takes a fresh slot.
LATE_S = 0.05

#: Slots one call may take because it woke up late, before it goes anyway.
MAX_RESERVATIONS = 4

#: Seconds a fleet-wide slot's lease outlasts the judge timeout (a killed worker's slots
#: come back after the timeout plus this).
LEASE_MARGIN_S = 5.0

#: Seconds between two looks for a fleet-wide slot, at first and at most (a slot given
#: back in this process wakes the looker at once).
SLOT_POLL_S = (0.005, 0.1)

#: What a judge call ends with.
Answer = JudgeReply | JudgeError

#: The next step of a call: the inner layers and, last, the provider.
Send = Callable[[JudgeRequest], Awaitable[Answer]]


class Layer(ABC):
    """One fleet concern around a judge call."""

    name: ClassVar[str]
    """The concern's name in :data:`~workers.judge.fleet.FLEET_ORDER`."""

    @abstractmethod
    async def __call__(self, request: JudgeRequest, send: Send) -> Answer:
        """Make the call through ``send``, or answer without it.

        Args:
            request: The call.
            send: The next step.

        Returns:
            What the call ended with.
        """

    async def aclose(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Release what the layer holds (connections)."""


class Concurrency(Layer):
    """At most ``limit`` calls of this process in flight; the rest wait their turn."""

    name = "concurrency"

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._slots: asyncio.Semaphore | None = None

    async def __call__(self, request: JudgeRequest, send: Send) -> Answer:
        """See :meth:`Layer.__call__`."""
        if self._slots is None:  # made on the loop that uses it
            self._slots = asyncio.Semaphore(self.limit)
        async with self._slots:
            return await send(request)


class Breaker(Layer):
    """The endpoint's circuit breaker: told how each call that was sent went.

    A transport failure (timeout, refused connection, 5xx) counts against the judge; an
    answer, a 429 (the judge is up, just busy) or a refusal (a prompt too long, a
    refused ``response_format``) counts for it. A call deferred unsent tells it nothing.
    """

    name = "breaker"

    def __init__(self, breaker: CircuitBreaker, *, endpoint: str) -> None:
        self.breaker = breaker
        self.endpoint = endpoint

    async def __call__(self, request: JudgeRequest, send: Send) -> Answer:
        """See :meth:`Layer.__call__`."""
        admission = self.breaker.admit(time.monotonic())
        if not admission.allowed:
            return JudgeDeferred(f"circuit open for {self.endpoint}",
                                 retry_after_s=admission.wait_s)
        try:
            answer = await send(request)
            if isinstance(answer, JudgeUnavailable) and answer.status_code != 429:
                self.breaker.failed(time.monotonic())
            elif not isinstance(answer, JudgeDeferred):  # sent, and answered somehow
                self.breaker.succeeded()
            return answer
        finally:
            self.breaker.release(admission)


class StepDown(Layer):
    """Sends each call in the strongest ``response_format`` its endpoint and model
    accept, learnt from refusals (:class:`~workers.judge.formats.FormatSupport`, shared by
    the fleet): a refusal lowers the mode and the call goes again at once, lower."""

    name = "response_format"

    def __init__(self, formats: FormatSupport, *,
                 on_step_down: Callable[[str, str], None] | None = None) -> None:
        self.formats = formats
        self.on_step_down = on_step_down
        """Told the judge model and its new mode when a refusal lowered it."""

    async def __call__(self, request: JudgeRequest, send: Send) -> Answer:
        """See :meth:`Layer.__call__`."""
        while True:
            request = self._fit(request)
            answer = await send(request)
            if not refuses_response_format(answer) or request.response_format is None:
                return answer
            refused = mode_of(request.response_format)
            lowered = self.formats.step_down(request.model, refused=refused)
            if lowered is not None:
                logger.warning("judge model %s refuses response_format %s (%s): using %s "
                               "from now on", request.model, refused, answer, lowered)
                if self.on_step_down is not None:
                    self.on_step_down(request.model, lowered)

    def _fit(self, request: JudgeRequest) -> JudgeRequest:
        fitted = shaped(request.response_format, self.formats.mode_for(request.model))
        return request if fitted is request.response_format else replace(
            request, response_format=fitted)


class CacheKeyDrop(Layer):
    """Sends ``prompt_cache_key`` only to an endpoint and model that accept it, learnt from
    refusals (:class:`~workers.judge.cache_key.CacheKeySupport`, shared by the fleet): a
    refusal drops it and the call goes again at once, once, without it."""

    name = "prompt_cache_key"

    def __init__(self, support: CacheKeySupport) -> None:
        self.support = support

    async def __call__(self, request: JudgeRequest, send: Send) -> Answer:
        """See :meth:`Layer.__call__`."""
        if request.prompt_cache_key is None:
            return await send(request)
        if not self.support.accepts(request.model):
            return await send(replace(request, prompt_cache_key=None))
        answer = await send(request)
        if not refuses_prompt_cache_key(answer):
            return answer
        if self.support.refuse(request.model):
            logger.warning("judge model %s refuses prompt_cache_key (%s): not sent from now on",
                           request.model, answer)
        return await send(replace(request, prompt_cache_key=None))


@dataclass(frozen=True)
class Pacing:
    """How calls are paced: rate budgets per model, and how long a call may wait."""

    limiter: RateLimiter | None = None
    budget_for: Callable[[str], RateLimit] = lambda model: RateLimit()
    max_wait_s: float = 2.0
    on_wait: Callable[[str, float], None] | None = None
    """Told the metric and seconds each call waited for rate budget."""


@dataclass
class Ticket:
    """A call's claim on the rate budget."""

    budget: RateLimit
    estimate: int
    """The tokens reserved for the call before it was sent."""
    due_s: float | None = None
    """When its rate-budget slot is (monotonic seconds); None: no slot needed."""


class RateBudget(Layer):
    """The fleet's rate budget (requests and tokens per minute) of each model of one
    endpoint: each call waits for its slot, and its token count is corrected once the
    judge says how many it used."""

    name = "rate_limit"

    def __init__(self, pacing: Pacing, *, endpoint: str) -> None:
        self.pacing = pacing
        self.endpoint = endpoint

    async def __call__(self, request: JudgeRequest, send: Send) -> Answer:
        """See :meth:`Layer.__call__`."""
        ticket = Ticket(self.pacing.budget_for(request.model), estimate_tokens(request))
        deferred = await self.pace(request, ticket)
        if deferred is not None:
            return deferred
        answer = await send(request)
        if isinstance(answer, JudgeReply):
            await self._correct(request.model, ticket, answer)
        return answer

    async def pace(self, request: JudgeRequest, ticket: Ticket) -> JudgeDeferred | None:
        """Wait for the call's rate-budget slot (taking a fresh one while it wakes up
        late), or say why it may not be sent now."""
        for _ in range(MAX_RESERVATIONS):
            deferred = await self._reserve(request, ticket)
            if deferred is not None or not self.late(ticket):
                return deferred
        return None

    @staticmethod
    def late(ticket: Ticket) -> bool:
        """True when the call's slot passed more than :data:`LATE_S` ago."""
        return ticket.due_s is not None and time.monotonic() - ticket.due_s > LATE_S

    async def _reserve(self, request: JudgeRequest, ticket: Ticket) -> JudgeDeferred | None:
        limiter, model, budget = self.pacing.limiter, request.model, ticket.budget
        ticket.due_s = None
        if limiter is None or budget.unlimited:
            return None
        try:
            reservation = await limiter.reserve(self._key(model), budget=budget,
                                                tokens=ticket.estimate,
                                                max_wait_s=self.pacing.max_wait_s)
        except Exception as exc:
            logger.warning("rate limiter unavailable, sending unpaced: %s", exc)
            return None
        if not reservation.granted:
            return JudgeDeferred(f"rate budget of {model} spent",
                                 retry_after_s=reservation.wait_s)
        ticket.due_s = time.monotonic() + reservation.wait_s
        if self.pacing.on_wait is not None:
            self.pacing.on_wait(request.metric, reservation.wait_s)
        if reservation.wait_s > 0:
            await asyncio.sleep(reservation.wait_s)
        return None

    async def _correct(self, model: str, ticket: Ticket, reply: JudgeReply) -> None:
        limiter, budget = self.pacing.limiter, ticket.budget
        if limiter is None or budget.unlimited or reply.prompt_tokens is None:
            return
        used = reply.prompt_tokens + (reply.completion_tokens or 0)
        try:
            await limiter.correct(self._key(model), budget=budget, tokens=used - ticket.estimate)
        except Exception as exc:
            logger.warning("rate limiter unavailable, token count not corrected: %s", exc)

    def _key(self, model: str) -> str:
        return f"{self.endpoint}|{model}"

    async def aclose(self) -> None:
        """Release the limiter's connections."""
        if self.pacing.limiter is not None:
            await self.pacing.limiter.close()


@dataclass(frozen=True)
class InFlightCap:
    """The fleet-wide cap on calls in flight per endpoint and model."""

    slots: Slots | None = None
    """Where the slots are held (Redis for the fleet); None: no cap."""
    limit_for: Callable[[str], int | None] = lambda model: None
    """The cap of a judge model (None: no cap)."""
    lease_s: float = 60.0 + LEASE_MARGIN_S
    """When a slot returns by itself: the judge timeout plus :data:`LEASE_MARGIN_S`."""
    max_wait_s: float = 10.0
    """Longest a call waits for a slot; then its job goes back to the queue."""
    adaptive_max: int | None = None
    """When set, the cap adapts (:mod:`workers.limiter.adaptive`) between 1 and this (or
    the model's ``limit_for``, when lower) to what the server sustains."""


class InFlight(Layer):
    """Holds a fleet-wide slot while the call is at the judge; waits for one, or defers
    the call unsent when none frees up within ``max_wait_s`` (its job goes back to the
    queue and the worker stops taking that queue for a while, as for rate budget). With
    an adaptive cap, giving the slot back reports the call's latency to the limit.

    In a process, one call per key at a time looks for a slot; the others wait their
    turn, so hundreds of waiting calls cost one Redis round trip per look, not hundreds.
    A slot store that cannot be reached does not stop judging, nor lets the worker flood
    the server: while it is away this process holds the cap on its own (its own slots, an
    adaptive limit learnt afresh from 1), so the fleet sends at most the cap per worker.
    """

    name = "in_flight"

    def __init__(self, cap: InFlightCap, *, endpoint: str) -> None:
        self.cap = cap
        self.endpoint = endpoint
        self._turns: dict[str, asyncio.Lock] = {}
        self._freed: dict[str, asyncio.Event] = {}
        self._own = LocalSlots()
        self._store_away = False

    async def __call__(self, request: JudgeRequest, send: Send) -> Answer:
        """See :meth:`Layer.__call__`."""
        key = f"{self.endpoint}|{request.model}"
        limit = self.limit(request.model)
        if self.cap.slots is None or limit is None:
            return await send(request)
        taken = await self._take(key, model=request.model, limit=limit)
        if isinstance(taken, JudgeDeferred):
            return taken
        started = time.monotonic()
        answer: Answer | None = None
        try:
            answer = await send(request)
            return answer
        finally:
            await self._give_back(*taken, key=key, limit=limit,
                                  report=self._report(answer, started))

    def limit(self, model: str) -> int | None:
        """The cap of a judge model, or the most an adaptive one may reach (None: none)."""
        fixed = self.cap.limit_for(model)
        if self.cap.adaptive_max is None:
            return fixed
        return min(self.cap.adaptive_max, fixed or self.cap.adaptive_max)

    def _report(self, answer: Answer | None, started: float) -> Report | None:
        # An answer, or a sign of overload; a refusal (a format, a prompt too long) says
        # nothing about the server's load.
        if self.cap.adaptive_max is None or answer is None:
            return None
        overloaded = isinstance(answer, JudgeUnavailable) and (
            answer.status_code is None or answer.status_code in (429, 503))
        if not overloaded and not isinstance(answer, JudgeReply):
            return None
        return Report(time.monotonic() - started, overloaded=overloaded)

    async def _take(self, key: str, *, model: str,
                    limit: int) -> tuple[Slots, str] | JudgeDeferred:
        """A slot (the store it came from and its token) or a deferral. Each look reads
        an adaptive limit afresh (it moves while calls wait)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.cap.max_wait_s
        deferred = JudgeDeferred(f"no free judge slot for {model} (the fleet's cap on calls "
                                 "in flight)", retry_after_s=self.cap.max_wait_s)
        turn = self._turns.setdefault(key, asyncio.Lock())
        freed = self._freed.setdefault(key, asyncio.Event())
        try:
            await asyncio.wait_for(turn.acquire(), timeout=max(0.0, deadline - loop.time()))
        except TimeoutError:
            return deferred
        try:
            poll_s = SLOT_POLL_S[0]
            while True:
                freed.clear()
                taken = await self._take_slot(key, limit=limit)
                if taken is not None:
                    return taken
                remaining_s = deadline - loop.time()
                if remaining_s <= 0:
                    return deferred
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(freed.wait(), timeout=min(poll_s, remaining_s))
                poll_s = min(poll_s * 2, SLOT_POLL_S[1])
        finally:
            turn.release()

    async def _take_slot(self, key: str, *, limit: int) -> tuple[Slots, str] | None:
        """A slot from the fleet's store, or from this process's own while that store
        cannot be reached (said once when it goes away and once when it is back); None
        when all are held."""
        assert self.cap.slots is not None
        adaptive = self.cap.adaptive_max is not None
        slots: Slots = self.cap.slots
        try:
            # Calls still on this process's own slots from an outage count against the
            # fleet's cap until they end: the store does not know of them.
            token = await slots.take(key, limit=limit, lease_s=self.cap.lease_s,
                                     adaptive=adaptive,
                                     held_elsewhere=await self._own.held(key))
        except Exception as exc:
            if not self._store_away:
                logger.warning("judge slots unavailable, holding the cap in this process "
                               "until they are back: %s", exc)
            self._store_away = True
            slots = self._own
            token = await slots.take(key, limit=limit, lease_s=self.cap.lease_s,
                                     adaptive=adaptive)
        else:
            if self._store_away:
                logger.warning("judge slots reachable again: the fleet's cap is shared")
            self._store_away = False
        return None if token is None else (slots, token)

    async def _give_back(self, slots: Slots, token: str, *, key: str, limit: int,
                         report: Report | None) -> None:
        try:
            await slots.give_back(key, token, limit=limit, report=report)
        except Exception as exc:  # the lease returns it
            logger.warning("judge slots unavailable, a slot returns with its lease: %s", exc)
        self._freed[key].set()

    async def aclose(self) -> None:
        """Release the slot store's connections."""
        if self.cap.slots is not None:
            await self.cap.slots.close()


def estimate_tokens(request: JudgeRequest) -> int:
    """Tokens a request may use before it is sent: the prompt's, estimated from its
    length, plus ``max_tokens`` (what providers count against a tokens-per-minute limit)."""
    return prompt_tokens(request.messages) + request.max_tokens
