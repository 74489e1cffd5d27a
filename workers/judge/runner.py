"""Many judge calls in flight from one worker process, on one private asyncio loop.

Celery's task threads hand their batches to :class:`JudgeRunner` and wait; the
loop keeps up to ``concurrency`` HTTP calls open at once. Hundreds of calls in
flight cost one thread and some sockets, not hundreds of threads or processes.

Before each call the runner asks the endpoint's circuit breaker and the fleet's
rate limiter; a call that would wait longer than ``max_wait_s`` is not sent and
comes back as :class:`~evalfleet.errors.JudgeDeferred`, so its job goes back to
the queue instead of holding a slot.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from evalfleet.errors import JudgeDeferred, JudgeError, JudgeUnavailable
from workers.breaker import CircuitBreaker
from workers.judge.base import JudgeClient, JudgeReply, JudgeRequest
from workers.judge.http_judge import AsyncHttpJudge
from workers.limiter import Budget, RateLimiter

logger = logging.getLogger(__name__)

#: Seconds to wait for in-flight calls when the runner closes.
CLOSE_TIMEOUT_S = 10.0

#: Characters per token when estimating a prompt before the call.
CHARS_PER_TOKEN = 4


@dataclass(frozen=True)
class Pacing:
    """How the runner paces calls: rate budgets per model, and how long a call may wait."""

    limiter: RateLimiter | None = None
    budget_for: Callable[[str], Budget] = lambda model: Budget()
    max_wait_s: float = 2.0
    on_wait: Callable[[str, float], None] | None = None
    """Told the metric and seconds each call waited for rate budget."""


class JudgeRunner(JudgeClient):
    """A thread-safe, blocking face over an :class:`AsyncHttpJudge` running on its own loop."""

    def __init__(self, client: AsyncHttpJudge, *, concurrency: int,
                 pacing: Pacing | None = None, breaker: CircuitBreaker | None = None) -> None:
        self._client = client
        self._pacing = pacing or Pacing()
        self._breaker = breaker or CircuitBreaker()
        self._loop = asyncio.new_event_loop()
        self._slots = asyncio.Semaphore(concurrency)
        self._thread = threading.Thread(target=self._loop.run_forever, name="judge-loop",
                                        daemon=True)
        self._thread.start()

    def complete_many(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply | JudgeError]:
        """See :meth:`JudgeClient.complete_many`. Blocks the calling thread, not the loop."""
        if not requests:
            return []
        return asyncio.run_coroutine_threadsafe(self._gather(requests), self._loop).result()

    async def _gather(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply | JudgeError]:
        return list(await asyncio.gather(*(self._one(request) for request in requests)))

    async def _one(self, request: JudgeRequest) -> JudgeReply | JudgeError:
        async with self._slots:
            admission = self._breaker.admit(time.monotonic())
            if not admission.allowed:
                return JudgeDeferred(f"circuit open for {self._client.endpoint}",
                                     retry_after_s=admission.wait_s)
            try:
                return await self._paced_call(request)
            finally:
                self._breaker.release(admission)

    async def _paced_call(self, request: JudgeRequest) -> JudgeReply | JudgeError:
        budget = self._pacing.budget_for(request.model)
        estimate = estimate_tokens(request)
        deferred = await self._reserve(request, budget, estimate)
        if deferred is not None:
            return deferred
        try:
            reply = await self._client.complete(request)
        except JudgeUnavailable as exc:
            if exc.status_code == 429:  # the judge is up, just busy
                self._breaker.succeeded()
            else:
                self._breaker.failed(time.monotonic())
            return exc
        except JudgeError as exc:
            self._breaker.succeeded()
            return exc
        self._breaker.succeeded()
        await self._correct(request.model, budget, estimate, reply)
        return reply

    async def _reserve(self, request: JudgeRequest, budget: Budget,
                       tokens: int) -> JudgeDeferred | None:
        limiter, model = self._pacing.limiter, request.model
        if limiter is None or budget.unlimited:
            return None
        try:
            reservation = await limiter.reserve(self._key(model), budget=budget, tokens=tokens,
                                                max_wait_s=self._pacing.max_wait_s)
        except Exception as exc:
            # A limiter outage must not stop judging; the judge's own 429s still pace us.
            logger.warning("rate limiter unavailable, sending unpaced: %s", exc)
            return None
        if not reservation.granted:
            return JudgeDeferred(f"rate budget of {model} spent",
                                 retry_after_s=reservation.wait_s)
        if self._pacing.on_wait is not None:
            self._pacing.on_wait(request.metric, reservation.wait_s)
        if reservation.wait_s > 0:
            await asyncio.sleep(reservation.wait_s)
        return None

    async def _correct(self, model: str, budget: Budget, estimate: int,
                       reply: JudgeReply) -> None:
        limiter = self._pacing.limiter
        if limiter is None or budget.unlimited or reply.prompt_tokens is None:
            return
        used = reply.prompt_tokens + (reply.completion_tokens or 0)
        try:
            await limiter.correct(self._key(model), budget=budget, tokens=used - estimate)
        except Exception as exc:
            logger.warning("rate limiter unavailable, token count not corrected: %s", exc)

    def _key(self, model: str) -> str:
        return f"{self._client.endpoint}|{model}"

    def close(self) -> None:
        """See :meth:`JudgeClient.close`."""
        if not self._loop.is_running():
            return

        async def shutdown() -> None:
            await self._client.close()
            if self._pacing.limiter is not None:
                await self._pacing.limiter.close()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(CLOSE_TIMEOUT_S)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(CLOSE_TIMEOUT_S)


def estimate_tokens(request: JudgeRequest) -> int:
    """Tokens a request may use before it is sent: the prompt's, estimated from its
    length, plus ``max_tokens`` (what providers count against a tokens-per-minute limit)."""
    characters = sum(len(message["content"]) for message in request.messages)
    return math.ceil(characters / CHARS_PER_TOKEN) + request.max_tokens
