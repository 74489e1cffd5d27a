"""Many judge calls in flight from one worker process, on one private asyncio loop.

Celery's task threads hand their batches to :class:`JudgeRunner` and wait; the
loop keeps up to ``concurrency`` HTTP calls open at once. Hundreds of calls in
flight cost one thread and some sockets, not hundreds of threads or processes.

Before each call the runner asks its :class:`~workers.judge.gate.CallGate` (the
endpoint's circuit breaker and the fleet's rate limiter); a call that would wait
longer than ``max_wait_s`` is not sent and comes back as
:class:`~evalfleet.core.errors.JudgeDeferred`, so its job goes back to the queue instead
of holding a slot.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from evalfleet.core.errors import JudgeDeferred, JudgeError
from workers.breaker import CircuitBreaker
from workers.judge.base import Answered, JudgeClient, JudgeReply, JudgeRequest
from workers.judge.gate import CallGate, Pacing
from workers.judge.http_judge import AsyncHttpJudge

__all__ = ["JudgeRunner", "Pacing"]

#: Seconds to wait for in-flight calls when the runner closes.
CLOSE_TIMEOUT_S = 10.0


class JudgeRunner(JudgeClient):
    """A thread-safe, blocking face over an :class:`AsyncHttpJudge` running on its own loop."""

    def __init__(self, client: AsyncHttpJudge, *, concurrency: int,
                 pacing: Pacing | None = None, breaker: CircuitBreaker | None = None) -> None:
        self._client = client
        self._gate = CallGate(endpoint=client.endpoint, pacing=pacing, breaker=breaker)
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

    def answers(self, requests: Sequence[JudgeRequest], *,
                gather_s: float = 0.0) -> Iterator[list[Answered]]:
        """See :meth:`JudgeClient.answers`: each answer is handed over as it arrives.

        Raises:
            Exception: What a call raised that is no judge error (a bug), as soon as
                it is taken.
        """
        if not requests:
            return
        arrived: queue.SimpleQueue[tuple[int, JudgeReply | JudgeError | BaseException]] = (
            queue.SimpleQueue())
        asyncio.run_coroutine_threadsafe(self._hand_over(requests, arrived.put), self._loop)
        remaining = len(requests)
        while remaining:
            chunk = [arrived.get()]
            until = time.monotonic() + gather_s
            while len(chunk) < remaining:  # what arrives meanwhile goes in the same chunk
                wait_s = until - time.monotonic()
                try:
                    chunk.append(arrived.get(timeout=wait_s) if wait_s > 0
                                 else arrived.get_nowait())
                except queue.Empty:
                    break
            remaining -= len(chunk)
            yield [_answered(index, answer) for index, answer in chunk]

    async def _hand_over(
        self, requests: Sequence[JudgeRequest],
        put: Callable[[tuple[int, JudgeReply | JudgeError | BaseException]], None],
    ) -> None:
        async def one(index: int, request: JudgeRequest) -> None:
            try:
                put((index, await self._one(request)))
            except BaseException as exc:  # the waiting thread must not wait for ever
                put((index, exc))
                raise

        await asyncio.gather(*(one(index, request) for index, request in enumerate(requests)),
                             return_exceptions=True)

    async def _one(self, request: JudgeRequest) -> JudgeReply | JudgeError:
        async with self._slots:
            ticket = await self._gate.enter(request)
            if isinstance(ticket, JudgeDeferred):
                return ticket
            try:
                answer: JudgeReply | JudgeError
                try:
                    answer = await self._client.complete(request)
                except JudgeError as exc:
                    answer = exc
                await self._gate.settle(request, ticket, answer)
                return answer
            finally:
                self._gate.release(ticket)

    def close(self) -> None:
        """See :meth:`JudgeClient.close`."""
        if not self._loop.is_running():
            return

        async def shutdown() -> None:
            await self._client.close()
            await self._gate.aclose()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(CLOSE_TIMEOUT_S)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(CLOSE_TIMEOUT_S)



def _answered(index: int, answer: JudgeReply | JudgeError | BaseException) -> Answered:
    if not isinstance(answer, JudgeReply | JudgeError):
        raise answer
    return index, answer
