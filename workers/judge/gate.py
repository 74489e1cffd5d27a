"""What every judge call passes before it is sent: its endpoint's circuit breaker and
the fleet's rate budget for its model.

:class:`CallGate` is the one place both are asked and told, whichever client sends
the call: :class:`~workers.judge.runner.JudgeRunner` (the lean HTTP client, on its
own loop) and :class:`PacedJudge` (a blocking client, the ``openai`` one). A call
that would wait longer than ``max_wait_s`` for budget, or whose circuit is open, is
not sent and comes back as :class:`~evalfleet.core.errors.JudgeDeferred`.

A limiter that cannot be reached (its Redis down) does not stop judging: the call
goes unpaced and the judge's own 429s pace the fleet. Running out of connections to
that Redis is not an outage: the limiter's pool makes the call wait for one (see
:mod:`workers.limiter.redis`). Unpaced calls at start-up, when 128 calls at once
found the pool empty, were what took the fleet to 123% of its limit.

A call that wakes up more than :data:`LATE_S` after its slot (a busy machine: the
loop or the calling thread did not get the CPU in time) takes a fresh slot instead of
going out in the next one's: late calls landing on top of punctual ones put 211
requests in a 10 s window of 200 on a loaded 2-core machine.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from evalfleet.core.errors import JudgeDeferred, JudgeError, JudgeUnavailable
from evalfleet.core.ratelimit import RateLimit
from workers.breaker import Admission, CircuitBreaker
from workers.judge.base import JudgeReply, JudgeRequest, OneAtATimeJudge
from workers.limiter import RateLimiter

logger = logging.getLogger(__name__)

#: Characters per token when estimating a prompt before the call.
CHARS_PER_TOKEN = 4

#: Seconds to wait for the gate's loop when a client closes.
CLOSE_TIMEOUT_S = 10.0

#: Seconds after its slot a call may still go out on it; later, it takes a fresh slot.
LATE_S = 0.05

#: Slots one call may take because it woke up late, before it goes anyway.
MAX_RESERVATIONS = 4

_T = TypeVar("_T")


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
    """A call let through the gate: hand it back with :meth:`CallGate.settle`."""

    admission: Admission
    budget: RateLimit
    estimate: int
    """The tokens reserved for the call before it was sent."""
    due_s: float | None = None
    """When its rate-budget slot is (monotonic seconds); None: no slot needed."""


class CallGate:
    """The breaker and the rate budget of one endpoint. Use from one event loop."""

    def __init__(self, *, endpoint: str, pacing: Pacing | None = None,
                 breaker: CircuitBreaker | None = None) -> None:
        self.endpoint = endpoint
        self.pacing = pacing or Pacing()
        self.breaker = breaker or CircuitBreaker()

    async def enter(self, request: JudgeRequest) -> Ticket | JudgeDeferred:
        """Wait until ``request`` may be sent, or say why it may not be sent now."""
        admission = self.breaker.admit(time.monotonic())
        if not admission.allowed:
            return JudgeDeferred(f"circuit open for {self.endpoint}",
                                 retry_after_s=admission.wait_s)
        ticket = Ticket(admission, self.pacing.budget_for(request.model),
                        estimate_tokens(request))
        try:
            deferred = await self.pace(request, ticket)
        except BaseException:
            self.breaker.release(admission)
            raise
        if deferred is not None:
            self.breaker.release(admission)
            return deferred
        return ticket

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

    async def settle(self, request: JudgeRequest, ticket: Ticket,
                     answer: JudgeReply | JudgeError) -> None:
        """Tell the breaker how the call went and correct the tokens it reserved."""
        if isinstance(answer, JudgeUnavailable) and answer.status_code != 429:
            self.breaker.failed(time.monotonic())
        else:  # an answer, a 429 (the judge is up, just busy) or a refusal
            self.breaker.succeeded()
        if isinstance(answer, JudgeReply):
            await self._correct(request.model, ticket, answer)

    def release(self, ticket: Ticket) -> None:
        """The call is over (also when it was cancelled before :meth:`settle`)."""
        self.breaker.release(ticket.admission)

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


class PacedJudge(OneAtATimeJudge):
    """A blocking judge client (the ``openai`` one) behind a :class:`CallGate`.

    The calling thread sends; the gate runs on a private loop thread, so one breaker
    and one limiter connection pool serve every task thread of the process.
    """

    def __init__(self, client: OneAtATimeJudge, *, endpoint: str, pacing: Pacing | None = None,
                 breaker: CircuitBreaker | None = None) -> None:
        self._client = client
        self._gate = CallGate(endpoint=endpoint, pacing=pacing, breaker=breaker)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="judge-gate",
                                        daemon=True)
        self._thread.start()

    def complete_one(self, request: JudgeRequest) -> JudgeReply | JudgeError:
        """See :meth:`OneAtATimeJudge.complete_one`: through the gate."""
        ticket = self._run(self._gate.enter(request))
        if isinstance(ticket, JudgeDeferred):
            return ticket
        try:
            if self._gate.late(ticket):  # this thread woke up after the call's slot
                deferred = self._run(self._gate.pace(request, ticket))
                if deferred is not None:
                    return deferred
            answer = self._client.complete_one(request)
            self._run(self._gate.settle(request, ticket, answer))
            return answer
        finally:
            self._loop.call_soon_threadsafe(self._gate.release, ticket)

    def _run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def close(self) -> None:
        """See :meth:`JudgeClient.close`."""
        self._client.close()
        if not self._loop.is_running():
            return
        asyncio.run_coroutine_threadsafe(self._gate.aclose(), self._loop).result(CLOSE_TIMEOUT_S)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(CLOSE_TIMEOUT_S)


def estimate_tokens(request: JudgeRequest) -> int:
    """Tokens a request may use before it is sent: the prompt's, estimated from its
    length, plus ``max_tokens`` (what providers count against a tokens-per-minute limit)."""
    characters = sum(len(message["content"]) for message in request.messages)
    return math.ceil(characters / CHARS_PER_TOKEN) + request.max_tokens
