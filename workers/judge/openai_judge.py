"""A judge provider on the ``openai`` client: any OpenAI-compatible endpoint.

Kept for judges that need the client's own behaviour (provider plugins, auth
refresh). It costs about 3 ms of CPU per call against 0.2 ms for
:class:`~workers.judge.http_judge.AsyncHttpJudge` (``bench/judge_client.py``). It runs
on the fleet's loop, like the lean provider, through the same fleet concerns
(:mod:`workers.judge.fleet`).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import httpx
import openai

from evalfleet.core.backoff import parse_retry_after
from evalfleet.core.errors import JudgeError, JudgeUnavailable
from workers.judge.base import JudgeReply, JudgeRequest
from workers.judge.http_judge import DEFAULT_BASE_URL, PLACEHOLDER_API_KEY
from workers.judge.http_status import classify_status
from workers.judge.provider import JudgeProvider, ProviderCapabilities
from workers.judge.reply import DEFAULT_MAX_REPLY_BYTES, reply_from_body, too_large_reply


class OpenAIJudge(JudgeProvider):
    """Chat completions through one ``openai.AsyncOpenAI`` client (use in one loop)."""

    def __init__(self, *, base_url: str | None, api_key: str | None, timeout_s: float,
                 max_connections: int | None = None,
                 max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES) -> None:
        self._endpoint = (base_url or DEFAULT_BASE_URL).rstrip("/") + "/chat/completions"
        # max_retries=0: the worker owns the one retry layer (backoff, Retry-After).
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key or PLACEHOLDER_API_KEY, timeout=timeout_s,
            max_retries=0,
        )
        self._max_reply_bytes = max_reply_bytes
        self.capabilities = ProviderCapabilities(name="openai", max_connections=max_connections)

    @property
    def endpoint(self) -> str:
        """See :attr:`JudgeProvider.endpoint`: the same name the lean provider gives it,
        so both share the endpoint's budgets."""
        return self._endpoint

    async def generate(self, request: JudgeRequest) -> JudgeReply:
        """See :meth:`JudgeProvider.generate`."""
        started = time.perf_counter()
        # The body is read in chunks up to the cap, then parsed as the lean provider does.
        try:
            async with self._client.chat.completions.with_streaming_response.create(
                    **request.payload()) as response:
                raw = await self._read(response.iter_bytes(65_536))
        except openai.OpenAIError as exc:
            raise _translate(exc) from exc
        except httpx.HTTPError as exc:
            raise JudgeUnavailable(f"cannot read the judge's reply: {type(exc).__name__}") from exc
        latency_ms = round((time.perf_counter() - started) * 1000)
        if raw is None:
            return too_large_reply(latency_ms=latency_ms)
        return reply_from_body(raw, latency_ms=latency_ms)

    async def list_models(self) -> list[str] | None:
        """See :meth:`JudgeProvider.list_models`."""
        try:
            return [model.id async for model in self._client.models.list()]
        except openai.OpenAIError as exc:
            raise _translate(exc) from exc

    async def _read(self, chunks: AsyncIterator[bytes]) -> bytes | None:
        kept: list[bytes] = []
        size = 0
        async for chunk in chunks:
            size += len(chunk)
            if size > self._max_reply_bytes:
                return None
            kept.append(chunk)
        return b"".join(kept)

    async def aclose(self) -> None:
        """See :meth:`JudgeProvider.aclose`."""
        await self._client.close()


def _translate(exc: openai.OpenAIError) -> JudgeError:
    """Map an ``openai`` exception onto the project's tree, most specific first."""
    if isinstance(exc, openai.APITimeoutError):
        return JudgeUnavailable("judge call timed out")
    if isinstance(exc, openai.APIConnectionError):
        return JudgeUnavailable(f"cannot reach the judge: {exc}")
    if isinstance(exc, openai.APIStatusError):
        return classify_status(
            exc.status_code, message=exc.message, body=exc.body,
            retry_after_s=parse_retry_after(exc.response.headers),
        )
    return JudgeUnavailable(f"unreadable judge reply: {exc}")
