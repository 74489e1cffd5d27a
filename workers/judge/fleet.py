"""The one place the fleet's concerns wrap a judge provider, in one order, each once.

:class:`JudgeFleet` is the worker's judge: a thread-safe, blocking face over any
:class:`~workers.judge.provider.JudgeProvider`, which it runs on one private asyncio
loop. Celery's task threads hand it their batches and take the answers as they arrive;
hundreds of calls in flight cost one thread and some sockets.

Each call passes the concerns of :data:`FLEET_ORDER`, outermost first:

1. ``deadline``: once the worker's shutdown grace period ends, the task thread stops
   waiting (:class:`~evalfleet.core.errors.WorkerShuttingDown`) and no call starts;
   calls still in flight are abandoned (the loop thread is a daemon).
2. ``concurrency``: at most ``concurrency`` calls of the process in flight.
3. ``breaker``: the endpoint's circuit breaker; an open circuit defers the call unsent.
4. ``response_format``: the step-down to the strongest format the endpoint and model
   accept; a refusal lowers it, fleet-wide, and the call goes again at once.
5. ``prompt_cache_key``: sent only where the endpoint and model accept it; a refusal
   drops it, fleet-wide, and the call goes again at once without it.
6. ``rate_limit``: the fleet's rate budget per endpoint and model; each send (a
   stepped-down one too) takes its own slot, as the server counts it.
7. ``in_flight``: the fleet-wide cap on calls in flight per endpoint and model (a lease
   in Redis), held only while the call is at the judge.

The order matters: a refused format or cache key is an answer, so it never trips the
breaker; a call that waits for rate budget holds its concurrency slot and its breaker
admission.

A fleet may also reach named endpoints (:class:`Endpoint`: another server, for a
cascade tier that names one). Each has its own provider and its own breaker, formats,
cache-key support, rate budgets and in-flight cap, so a small local server that fails
opens its own circuit, never the hosted judge's; the process's concurrency and the
shutdown deadline are shared. A request goes where its ``endpoint`` says (None: the
fleet's own provider).
Which of them apply depends on the provider's kind (:func:`layers_for`): a batch
provider answers later through its own submit and collect steps, so neither a
concurrency slot nor a rate-budget slot per call means anything for it, and its circuit
breaker is on the Batch API's requests, not on each collected line.
"""

from __future__ import annotations

import asyncio
import functools
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from evalfleet.core.errors import JudgeError, JudgeRejected, JudgeUnavailable, WorkerShuttingDown
from workers.breaker import CircuitBreaker
from workers.judge.base import Answered, JudgeClient, JudgeReply, JudgeRequest
from workers.judge.cache_key import CacheKeySupport
from workers.judge.formats import FormatSupport
from workers.judge.gate import (
    Answer,
    Breaker,
    CacheKeyDrop,
    Concurrency,
    InFlight,
    InFlightCap,
    Layer,
    Pacing,
    RateBudget,
    Send,
    StepDown,
)
from workers.judge.provider import JudgeProvider, ProviderCapabilities
from workers.shutdown import ShutdownDeadline

#: The fleet's concerns around a call, outermost first.
FLEET_ORDER = ("deadline", "concurrency", "breaker", "response_format", "prompt_cache_key",
               "rate_limit", "in_flight")

#: Concerns that do not apply to a batch provider: it makes no call per request (and its
#: lines carry no prompt_cache_key). Its breaker counts the Batch API's requests
#: (``workers.batchjudge.api.BatchApi``), not each line: a failed line is the provider's
#: answer about that request, not the endpoint's health.
PER_CALL_ONLY = frozenset({"concurrency", "breaker", "prompt_cache_key", "rate_limit",
                           "in_flight"})

#: Seconds to wait for in-flight calls when the fleet closes.
CLOSE_TIMEOUT_S = 10.0

#: Seconds between two looks at the shutdown deadline while a task thread waits.
DEADLINE_POLL_S = 0.2


def layers_for(capabilities: ProviderCapabilities) -> tuple[str, ...]:
    """The fleet's concerns that apply to a provider, in the order they wrap it.

    Args:
        capabilities: What the provider declares.

    Returns:
        Names from :data:`FLEET_ORDER`, outermost first.
    """
    if capabilities.kind == "batch":
        return tuple(name for name in FLEET_ORDER if name not in PER_CALL_ONLY)
    return FLEET_ORDER


@dataclass(frozen=True)
class Endpoint:
    """A named judge server a fleet sends to besides its own, with its own concerns
    (None: a fresh one, as for the fleet's own provider)."""

    provider: JudgeProvider
    pacing: Pacing | None = None
    """Its rate budgets."""
    breaker: CircuitBreaker | None = None
    formats: FormatSupport | None = None
    cap: InFlightCap | None = None
    """Its cap on calls in flight."""
    cache_keys: CacheKeySupport | None = None


class JudgeFleet(JudgeClient):
    """A provider wrapped in the fleet's concerns, with a blocking, thread-safe face.

    Args:
        provider: The judge provider.
        concurrency: Calls of this process in flight at most.
        pacing: The fleet's rate budgets (none: unpaced).
        breaker: The endpoint's circuit breaker (a fresh one by default).
        formats: The response formats the endpoint's models accept, learnt from refusals
            (by default in this fleet alone, up to ``json_schema``).
        deadline: The worker's shutdown deadline (none: never).
        on_step_down: Told the judge model and its new mode on each step-down.
        cap: The fleet-wide cap on calls in flight (none: no cap).
        cache_keys: The models of the endpoint that refuse ``prompt_cache_key``, learnt
            from refusals (by default in this process alone).
        endpoints: Named endpoints, each with its own concerns, for requests that name
            one (``JudgeRequest.endpoint``).
    """

    def __init__(self, provider: JudgeProvider, *, concurrency: int,
                 pacing: Pacing | None = None, breaker: CircuitBreaker | None = None,
                 formats: FormatSupport | None = None,
                 deadline: ShutdownDeadline | None = None,
                 on_step_down: Callable[[str, str], None] | None = None,
                 cap: InFlightCap | None = None,
                 cache_keys: CacheKeySupport | None = None,
                 endpoints: Mapping[str, Endpoint] | None = None) -> None:
        self.provider = provider
        self.deadline = deadline or ShutdownDeadline()
        self.formats = formats or FormatSupport("json_schema")
        """What the step-down learnt (a batch fleet shares its worker fleet's)."""
        self.cache_keys = cache_keys or CacheKeySupport()
        """What the ``prompt_cache_key`` drop learnt."""
        shared = Concurrency(concurrency)  # the process's, whichever server a call goes to
        self.layers: tuple[Layer, ...] = _layers(
            Endpoint(provider, pacing, breaker, self.formats, cap, self.cache_keys),
            concurrency=shared, on_step_down=on_step_down)
        self._send = _chain(self.layers, provider)
        self.endpoints: dict[str, tuple[Endpoint, tuple[Layer, ...]]] = {}
        """The named endpoints, each with the layers around its provider."""
        self._sends: dict[str | None, Send] = {None: self._send}
        for name, named in (endpoints or {}).items():
            layers = _layers(named, concurrency=shared, on_step_down=on_step_down)
            self.endpoints[name] = (named, layers)
            self._sends[name] = _chain(layers, named.provider)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="judge-loop",
                                        daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        """The provider's endpoint."""
        return self.provider.endpoint

    @property
    def order(self) -> tuple[str, ...]:
        """The concerns around each call, outermost first (``deadline`` included)."""
        return ("deadline", *(layer.name for layer in self.layers))

    def complete_many(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply | JudgeError]:
        """See :meth:`JudgeClient.complete_many`. Blocks the calling thread, not the loop.

        Raises:
            WorkerShuttingDown: The shutdown grace period ended first.
        """
        answers: list[JudgeReply | JudgeError | None] = [None] * len(requests)
        for chunk in self.answers(requests):
            for index, answer in chunk:
                answers[index] = answer
        return [answer for answer in answers if answer is not None]

    def answers(self, requests: Sequence[JudgeRequest], *,
                gather_s: float = 0.0) -> Iterator[list[Answered]]:
        """See :meth:`JudgeClient.answers`: each answer is handed over as it arrives.

        Raises:
            WorkerShuttingDown: The shutdown grace period ended before every answer
                arrived (those handed over stay handed over), or before the first call.
            Exception: What a call raised that is no judge error (a bug), as soon as
                it is taken.
        """
        if self.deadline.expired:
            raise WorkerShuttingDown("the worker is shutting down: not calling the judge")
        if not requests:
            return
        arrived: queue.SimpleQueue[tuple[int, Answer | BaseException]] = queue.SimpleQueue()
        asyncio.run_coroutine_threadsafe(self._hand_over(requests, arrived.put), self._loop)
        remaining = len(requests)
        while remaining:
            chunk = [self._first(arrived, remaining=remaining)]
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

    def _first(self, arrived: queue.SimpleQueue[tuple[int, Answer | BaseException]], *,
               remaining: int) -> tuple[int, Answer | BaseException]:
        """The next answer, or raise when the grace period ends first."""
        while True:
            try:
                return arrived.get(timeout=DEADLINE_POLL_S)
            except queue.Empty:
                if self.deadline.expired:
                    raise WorkerShuttingDown(
                        f"the shutdown grace period ended with {remaining} judge "
                        "request(s) unanswered") from None

    async def _hand_over(
        self, requests: Sequence[JudgeRequest],
        put: Callable[[tuple[int, Answer | BaseException]], None],
    ) -> None:
        async def one(index: int, request: JudgeRequest) -> None:
            try:
                put((index, await self._route(request)))
            except BaseException as exc:  # the waiting thread must not wait for ever
                put((index, exc))
                raise

        await asyncio.gather(*(one(index, request) for index, request in enumerate(requests)),
                             return_exceptions=True)

    async def _route(self, request: JudgeRequest) -> Answer:
        send = self._sends.get(request.endpoint)
        if send is None:  # the worker checks tiers' endpoints at start: a caller's slip
            return JudgeRejected(f"no judge endpoint named {request.endpoint!r}")
        return await send(request)

    def list_models(self, endpoint: str | None = None, *, timeout_s: float) -> list[str] | None:
        """The models a judge endpoint lists (its provider's
        :meth:`~workers.judge.provider.JudgeProvider.list_models`), asked on the fleet's
        loop from any thread: what ``evalfleet judge check`` and the readiness probe ask.
        No per-call concern applies: the list is no judge call.

        Args:
            endpoint: A named endpoint; None: the fleet's own provider.
            timeout_s: Longest wait for the answer.

        Returns:
            Their names, or None when the provider cannot list them.

        Raises:
            JudgeUnavailable: No answer within ``timeout_s``, or the endpoint cannot be
                reached.
            JudgeRejected: It refuses the request (auth), or no endpoint has that name.
        """
        if endpoint is None:
            provider = self.provider
        elif endpoint in self.endpoints:
            provider = self.endpoints[endpoint][0].provider
        else:
            raise JudgeRejected(f"no judge endpoint named {endpoint!r}")

        async def ask() -> list[str] | None:
            return await asyncio.wait_for(provider.list_models(), timeout_s)

        try:
            # The outer bound holds should the loop be gone (a closed fleet).
            return asyncio.run_coroutine_threadsafe(ask(), self._loop).result(
                timeout_s + CLOSE_TIMEOUT_S
            )
        except TimeoutError:
            raise JudgeUnavailable(
                f"no model list from {provider.endpoint} within {timeout_s:g} s"
            ) from None

    def close(self) -> None:
        """See :meth:`JudgeClient.close`: every provider's and layer's connections."""
        if not self._loop.is_running():
            return

        async def shutdown() -> None:
            await self.provider.aclose()
            for layer in self.layers:
                await layer.aclose()
            for named, layers in self.endpoints.values():
                await named.provider.aclose()
                for layer in layers:
                    if not isinstance(layer, Concurrency):  # shared: closed above
                        await layer.aclose()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(CLOSE_TIMEOUT_S)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(CLOSE_TIMEOUT_S)


def _layers(endpoint: Endpoint, *, concurrency: Concurrency,
            on_step_down: Callable[[str, str], None] | None) -> tuple[Layer, ...]:
    """The fleet's concerns around one endpoint's provider, in :data:`FLEET_ORDER`."""
    url = endpoint.provider.endpoint
    available: dict[str, Layer] = {
        "concurrency": concurrency,
        "breaker": Breaker(endpoint.breaker or CircuitBreaker(), endpoint=url),
        "response_format": StepDown(endpoint.formats or FormatSupport("json_schema"),
                                    on_step_down=on_step_down),
        "prompt_cache_key": CacheKeyDrop(endpoint.cache_keys or CacheKeySupport()),
        "rate_limit": RateBudget(endpoint.pacing or Pacing(), endpoint=url),
        "in_flight": InFlight(endpoint.cap or InFlightCap(), endpoint=url),
    }
    return tuple(available[name] for name in layers_for(endpoint.provider.capabilities)
                 if name != "deadline")


def _chain(layers: Sequence[Layer], provider: JudgeProvider) -> Send:
    """One call through ``layers``, outermost first, then the provider."""
    async def generate(request: JudgeRequest) -> Answer:
        try:
            return await provider.generate(request)
        except JudgeError as exc:
            return exc

    send: Send = generate
    for layer in reversed(layers):
        send = functools.partial(layer, send=send)
    return send


def _answered(index: int, answer: Answer | BaseException) -> Answered:
    if not isinstance(answer, JudgeReply | JudgeError):
        raise answer
    return index, answer
