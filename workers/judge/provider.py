"""The judge provider contract: a rendered request in, an answer or a classified failure out.

A provider is what differs between judges: how a request reaches the model (the lean
HTTP client, the ``openai`` client, later a batch API) and how that service's errors map
onto the project's tree. Everything the fleet does around a call (concurrency, circuit
breaker, rate budget, response-format step-down, the shutdown deadline) is the same for
every provider and lives in one place, :mod:`workers.judge.fleet`, which wraps any
provider in one order, each concern once.

A provider declares what it is in :class:`ProviderCapabilities`: ``kind`` tells the
fleet which concerns apply (:func:`workers.judge.fleet.layers_for`). A ``call`` provider
answers each request while the caller waits; a ``batch`` provider (submit now, collect
within hours) answers through its own submit and collect steps, so per-call concerns
(a concurrency slot, a rate-budget slot, a breaker per call) do not apply to it.

Rules for every provider:

- :meth:`JudgeProvider.generate` returns the reply, or raises a
  :class:`~evalfleet.core.errors.JudgeError`: ``JudgeUnavailable`` (may pass: transport,
  timeout, 429, 5xx), ``JudgeRejected`` (will not pass: bad request, auth, a prompt too
  long, a refused ``response_format``), classified once in
  :func:`workers.judge.http_status.classify_status`.
- It never retries on its own: retries belong to the worker.
- It reads the reply within the size cap (:mod:`workers.judge.reply`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Literal

from workers.judge.base import JudgeReply, JudgeRequest

#: How a provider answers: while the caller waits (``call``), or later (``batch``).
ProviderKind = Literal["call", "batch"]


@dataclass(frozen=True)
class ProviderCapabilities:
    """What a provider declares about itself (what a server accepts is learnt at run time,
    per endpoint and model, by the fleet: :mod:`workers.judge.capabilities`)."""

    name: str
    """Short name for logs and the fleet's table (``http``, ``openai``)."""
    kind: ProviderKind = "call"
    """``call``: one answer per request while the caller waits; ``batch``: submitted now,
    collected later."""
    max_connections: int | None = None
    """Connections the provider opens at most (None: no limit of its own)."""


class JudgeProvider(ABC):
    """Turns one rendered judge request into the judge's reply. Use from one event loop."""

    capabilities: ProviderCapabilities

    @property
    @abstractmethod
    def endpoint(self) -> str:
        """The URL requests go to, without credentials: it names this judge in Redis keys
        (rate limits, capabilities), log lines and errors (the circuit breaker). Two
        providers of one server name it alike, so they share its budgets."""

    @abstractmethod
    async def generate(self, request: JudgeRequest) -> JudgeReply:
        """Send one request and wait for its answer.

        Args:
            request: The chat completion to send, as the fleet shaped it.

        Returns:
            The judge's reply (its text may be unusable: parsing is the worker's).

        Raises:
            JudgeUnavailable: A failure that may pass.
            JudgeRejected: A failure that will not pass for this request.
        """

    async def list_models(self) -> list[str] | None:
        """The models the endpoint lists (``GET /models``), for ``evalfleet judge check``.

        Returns:
            Their names, or None when the provider cannot list them.

        Raises:
            JudgeUnavailable: The endpoint cannot be reached.
            JudgeRejected: It refuses the request (auth).
        """
        return None

    async def aclose(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Release connections."""
