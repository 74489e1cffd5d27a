"""The judge simulator over HTTP: an OpenAI-compatible Starlette app, its state and counters.

Routes::

    POST /v1/chat/completions   the judge (chat.completion shape; stream=true is refused)
    GET  /v1/models             the configured model names
    GET  /healthz               liveness
    GET  /_sim/config           the configuration in force
    PUT  /_sim/config           partial update of the configuration
    POST /_sim/script           replace the reply script: {"rules": [...]}
    GET  /_sim/stats            counters (``answered_by_prompt``: 200 replies per prompt,
                                leaving out hangs the client gave up on; ``cached_tokens``
                                the prompt cache served; ``by_prompt_cache_key``)
    POST /_sim/reset            clear counters, script, rate window, prompt cache, files
                                and batches; re-seed
    POST /v1/files              upload a batch input (multipart: file, purpose=batch)
    GET  /v1/files/{id}         a file object; /content its bytes
    POST /v1/batches            create a batch of an uploaded file
    GET  /v1/batches            list batches, newest first (limit, after)
    GET  /v1/batches/{id}       retrieve one; POST /v1/batches/{id}/cancel cancels it
    .../openai/files, /openai/batches...   the same, with ``batch_flavor: azure`` only
                                (an ``api-version`` query required); /v1/ ones then 404

Batches move on when looked at (:mod:`evalfleet.judgesim.batches`); their lines are
judged by the same code as a chat request, without latency, rate limit or script.

One request, in order: read and check the body (400 on error); count its
prompt; a refused parameter or ``response_format``, a prompt over the context; the
``rpm_limit`` window (429); the script; a random fault (429 at once); the prompt cache
(:mod:`evalfleet.judgesim.prompt_cache`); the latency draw and other faults; the reply.
Delays are ``asyncio.sleep``, so one process holds thousands of requests in flight.
Everything runs on the event loop thread, so the state needs no lock.
:mod:`evalfleet.judgesim.runner` serves the app.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.parser
import email.policy
import itertools
import json
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from evalfleet.core.errors import EvalfleetError, InvalidInput
from evalfleet.judgesim.batches import BatchBook, BatchRequestError
from evalfleet.judgesim.config import InvalidSimConfig, ServerStyle, SimConfig
from evalfleet.judgesim.faults import (
    OUTCOMES,
    Fault,
    Outcome,
    Script,
    ScriptedReply,
    SlidingWindow,
    decide_fault,
    first_answer_fault,
    retry_after_header,
    sample_latency_ms,
)
from evalfleet.judgesim.prompt_cache import PromptCache
from evalfleet.judgesim.quality import MAX_TOP_LOGPROBS
from evalfleet.judgesim.replies import (
    InvalidChatRequest,
    Prompt,
    Reply,
    build_reply,
    estimate_tokens,
    reply_with,
)
from evalfleet.judgesim.tools import ToolTurn, agent_turn, offered_tools

_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                403: "permission_error", 404: "not_found_error", 429: "requests"}
_SERVER_ERROR_MESSAGE = "The server had an error while processing your request. Sorry about that!"


class SimNotStarted(EvalfleetError):
    """The simulator's server did not start listening."""


#: Arrival ticks (100 ms each) kept in the stats: the last hour with traffic.
ARRIVAL_TICKS_KEPT = 36_000

#: Distinct ``prompt_cache_key`` values counted in the stats; later ones count as ``other``.
CACHE_KEYS_KEPT = 1000

class _Counters:
    """What ``GET /_sim/stats`` reports."""

    def __init__(self) -> None:
        self.requests = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.by_status: dict[str, int] = {}
        self.by_outcome: dict[str, int] = dict.fromkeys(OUTCOMES, 0)
        self.by_prompt: dict[str, int] = {}
        self.answered_by_prompt: dict[str, int] = {}
        self.arrivals: dict[int, int] = {}
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.by_prompt_cache_key: dict[str, int] = {}

    def begin(self) -> None:
        # Arrival counts per 100 ms of wall time, for rate checks over any window.
        tick = int(time.time() * 10)
        self.arrivals[tick] = self.arrivals.get(tick, 0) + 1
        if len(self.arrivals) > ARRIVAL_TICKS_KEPT:
            del self.arrivals[next(iter(self.arrivals))]  # ticks arrive in order
        self.requests += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def end(self, status: int) -> None:
        self.in_flight -= 1
        key = str(status)
        self.by_status[key] = self.by_status.get(key, 0) + 1

    def outcome(self, outcome: Outcome) -> None:
        self.by_outcome[outcome] += 1

    def prompt(self, key: str) -> None:
        self.by_prompt[key] = self.by_prompt.get(key, 0) + 1

    def answered(self, key: str) -> None:
        # A 200 reply, but not one to a client that left during a hang: a judge call
        # that could have become a verdict. Chaos tests count wasted calls by it.
        self.answered_by_prompt[key] = self.answered_by_prompt.get(key, 0) + 1

    def cache(self, *, key: str | None, prompt_tokens: int, cached_tokens: int) -> None:
        # What the prompt cache served; requests by the prompt_cache_key they carried.
        self.prompt_tokens += prompt_tokens
        self.cached_tokens += cached_tokens
        name = "none" if key is None else key
        if name not in self.by_prompt_cache_key and len(self.by_prompt_cache_key) >= (
                CACHE_KEYS_KEPT):
            name = "other"
        self.by_prompt_cache_key[name] = self.by_prompt_cache_key.get(name, 0) + 1

    def as_json(self) -> dict[str, Any]:
        return {
            "requests": self.requests, "in_flight": self.in_flight,
            "prompt_tokens": self.prompt_tokens, "cached_tokens": self.cached_tokens,
            "by_prompt_cache_key": dict(self.by_prompt_cache_key),
            "max_in_flight": self.max_in_flight, "by_status": dict(self.by_status),
            "by_outcome": dict(self.by_outcome), "by_prompt": dict(self.by_prompt),
            "answered_by_prompt": dict(self.answered_by_prompt),
            "arrivals_per_100ms": {str(tick): n for tick, n in sorted(self.arrivals.items())},
        }


class SimState:
    """Everything one simulator holds between requests."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.reset()

    def reset(self) -> None:
        """Clear counters, script, rate window and prompt cache, and re-seed; the config
        stays."""
        self.counters = _Counters()
        self.script = Script()
        self.rng = random.Random(self.config.seed)
        self.window = SlidingWindow(self.config.rpm_limit) if self.config.rpm_limit else None
        self.completion_ids = itertools.count(1)
        self.slots = _slots(self.config.serve_at_once)
        self.batches = BatchBook()
        self.prompt_cache = _prompt_cache(self.config)

    def configure(self, changes: Mapping[str, Any]) -> SimConfig:
        """Apply a partial update; a new seed re-seeds, a new ``rpm_limit`` empties the window.

        Raises:
            InvalidSimConfig: Naming the first bad field.
        """
        old, new = self.config, self.config.merge(changes)
        self.config = new
        if new.seed != old.seed:
            self.rng = random.Random(new.seed)
        if new.rpm_limit != old.rpm_limit:
            self.window = SlidingWindow(new.rpm_limit) if new.rpm_limit else None
        if new.serve_at_once != old.serve_at_once:
            self.slots = _slots(new.serve_at_once)
        if _cache_shape(new) != _cache_shape(old):
            self.prompt_cache = _prompt_cache(new)
        return new


def _slots(serve_at_once: int | None) -> asyncio.Semaphore | None:
    return asyncio.Semaphore(serve_at_once) if serve_at_once else None


def _cache_shape(config: SimConfig) -> tuple[int, int, int]:
    return (config.prompt_cache_block_tokens, config.prompt_cache_min_tokens,
            config.prompt_cache_max_blocks)


def _prompt_cache(config: SimConfig) -> PromptCache:
    return PromptCache(block_tokens=config.prompt_cache_block_tokens,
                       min_tokens=config.prompt_cache_min_tokens,
                       max_blocks=config.prompt_cache_max_blocks)


@dataclass(frozen=True, slots=True)
class _ChatRequest:
    prompt: Prompt
    model: str
    response_format: Any
    max_tokens: int | None
    prompt_cache_key: str | None
    """The request's ``prompt_cache_key``, if any."""
    parameters: frozenset[str]
    """The request's top-level parameter names."""
    messages: list[Any]
    """The request's messages as sent."""
    tools: list[dict[str, Any]]
    """The function tools offered (an agent's model call), if any."""
    top_logprobs: int | None = None
    """Alternatives per token when ``logprobs`` is true (0 without ``top_logprobs``);
    None when log-probabilities were not asked for."""


def create_app(config: SimConfig | None = None) -> Starlette:
    """The simulator as an ASGI application.

    Args:
        config: Initial configuration; None for the defaults.

    Returns:
        The Starlette app; its state is ``app.state.sim`` (a :class:`SimState`).
    """
    app = Starlette(
        routes=[
            Route("/v1/chat/completions", _chat_completions, methods=["POST"]),
            Route("/v1/models", _models, methods=["GET"]),
            Route("/healthz", _healthz, methods=["GET"]),
            Route("/_sim/config", _get_config, methods=["GET"]),
            Route("/_sim/config", _put_config, methods=["PUT"]),
            Route("/_sim/script", _post_script, methods=["POST"]),
            Route("/_sim/stats", _stats, methods=["GET"]),
            Route("/_sim/reset", _reset, methods=["POST"]),
            *_batch_routes(),
        ],
        exception_handlers={HTTPException: _http_error},
    )
    app.state.sim = SimState(config or SimConfig())
    return app


def _batch_routes() -> list[Route]:
    """Files and batches under ``/v1`` (OpenAI's paths) and ``/openai`` (Azure's)."""
    handlers: list[tuple[str, str, Callable[[Request], Awaitable[Response]]]] = [
        ("/files", "POST", _upload_file), ("/files/{file_id}", "GET", _get_file),
        ("/files/{file_id}/content", "GET", _file_content),
        ("/batches", "POST", _create_batch), ("/batches", "GET", _list_batches),
        ("/batches/{batch_id}", "GET", _get_batch),
        ("/batches/{batch_id}/cancel", "POST", _cancel_batch)]
    return [Route(f"{prefix}{path}", _flavored(handler, azure=prefix == "/openai"),
                  methods=[method])
            for prefix in ("/v1", "/openai") for path, method, handler in handlers]


def _flavored(handler: Callable[[Request], Awaitable[Response]], *,
              azure: bool) -> Callable[[Request], Awaitable[Response]]:
    """``handler`` where ``batch_flavor`` serves it: Azure's paths only as Azure (with
    its ``api-version`` query and the key in an ``api-key`` header: a key sent as a
    bearer token reads there as an Entra token, and is refused), OpenAI's only as anyone
    else."""
    async def guarded(request: Request) -> Response:
        sim: SimState = request.app.state.sim
        if (sim.config.batch_flavor == "azure") != azure:
            return _error(404, "Resource not found")
        if azure and not request.query_params.get("api-version"):
            return _error(400, "Missing required query parameter: api-version",
                          code="missing_required_parameter", param="api-version")
        if azure and not request.headers.get("api-key"):
            return _error(401, "Access denied due to invalid subscription key or wrong API "
                               "endpoint. Make sure to provide a valid key for an active "
                               "subscription and use a correct regional API endpoint.",
                          code="401")
        return await handler(request)
    return guarded


async def _chat_completions(request: Request) -> Response:
    sim: SimState = request.app.state.sim
    # Held for the whole request, so a reset meanwhile never unbalances in_flight.
    counters = sim.counters
    counters.begin()
    status = 500
    try:
        response = await _answer(sim, counters, request)
        status = response.status_code
        return response
    finally:
        counters.end(status)


async def _answer(sim: SimState, counters: _Counters, request: Request) -> Response:
    key = sim.config.api_key
    if key is not None and request.headers.get("authorization") != f"Bearer {key}":
        return _error(401, "Incorrect API key provided", code="invalid_api_key")
    try:
        chat = _read_chat_request(await request.body())
    except InvalidChatRequest as exc:
        return _error(400, str(exc), code=exc.code, param=exc.param)
    counters.prompt(chat.prompt.key)
    parameter = next((name for name in sim.config.refused_parameters
                      if name in chat.parameters), None)
    if parameter is not None:
        counters.outcome("parameter_refused")
        return _parameter_refusal(parameter, style=sim.config.server_style)
    refused = _refused_format(chat.response_format, config=sim.config)
    if refused is not None:
        counters.outcome("format_refused")
        return _format_refusal(refused, style=sim.config.server_style)
    context = sim.config.context_tokens
    if context is not None:
        wanted = estimate_tokens(chat.prompt.text) + (chat.max_tokens or 0)
        if wanted > context:
            counters.outcome("context_exceeded")
            return _context_refusal(wanted, context=context, style=sim.config.server_style)
    if sim.window is not None:
        wait_s = sim.window.admit(time.monotonic())
        if wait_s is not None:
            counters.outcome("rate_limited")
            return _rate_limited(wait_s)
    scripted = sim.script.take(chat.prompt.text)
    if scripted is not None:
        counters.outcome("scripted")
        response = await _scripted(sim, chat, scripted)
        if response.status_code == 200:
            counters.answered(chat.prompt.key)
        return response
    if sim.slots is None:
        return await _generate(sim, counters, request, chat)
    async with sim.slots:  # queued behind the requests being served, as in a real server
        return await _generate(sim, counters, request, chat)


async def _generate(sim: SimState, counters: _Counters, request: Request,
                    chat: _ChatRequest) -> Response:
    config = sim.config
    fault = decide_fault(sim.rng, config=config)
    if fault.outcome in ("ok", "malformed", "truncated"):
        fault = first_answer_fault(chat.prompt.roles, config=config) or fault
    counters.outcome(fault.outcome)
    if fault.outcome == "rate_limited":
        return _rate_limited(config.retry_after_s)
    # Looked up as the request is served (a server's prefill), before its latency: requests
    # served at once after the first find its prefix, as with a shared KV cache.
    cached_tokens = _serve_cache(sim, chat)
    await _sleep_ms(sample_latency_ms(sim.rng, config=config))
    if fault.outcome == "server_error":
        return _error(500, _SERVER_ERROR_MESSAGE)
    client_left = False
    if fault.outcome == "hang":
        client_left = await _hang(request, hang_s=config.hang_s)
        fault = Fault.none()
    if chat.tools:  # an agent's model: call its tools, then answer
        if not client_left:
            counters.answered(chat.prompt.key)
        return JSONResponse(_tool_completion(sim, chat, agent_turn(chat.messages, chat.tools)))
    reply = build_reply(chat.prompt, model=chat.model, response_format=chat.response_format,
                        fault=fault, max_tokens=chat.max_tokens,
                        shift=config.score_shifts.get(chat.model, 0.0),
                        flip=chat.model in config.flipped_answers,
                        profile=config.judge_profiles.get(chat.model),
                        top_logprobs=chat.top_logprobs)
    if not client_left:
        counters.answered(chat.prompt.key)
    return _completion(sim, chat, reply, cached_tokens=cached_tokens)


def _parameter_refusal(name: str, *, style: ServerStyle) -> Response:
    """A refused request parameter as ``style``'s server words it."""
    if style == "llama_cpp_python":  # pydantic validation of a model forbidding extras: 500
        return _error(500, "1 validation error for CreateChatCompletionRequest\n"
                           f"{name}\n  Extra inputs are not permitted [type=extra_forbidden]")
    if style == "vllm":
        return JSONResponse({"object": "error", "message": f"1 validation error: {name}: "
                             "Extra inputs are not permitted", "type": "BadRequestError",
                             "param": None, "code": 400}, status_code=400)
    # Azure OpenAI's wording for a parameter its API version does not know.
    return _error(400, f"Unrecognized request argument supplied: {name}", param=name)


def _format_refusal(refused: str, *, style: ServerStyle) -> Response:
    """A refused ``response_format`` as ``style``'s server words it."""
    if style == "llama_cpp_python":  # its request validation fails: 500, naming the field
        return _error(500, "1 validation error for CreateChatCompletionRequest\n"
                           f"response_format.type\n  Input should be 'text' or 'json_object' "
                           f"[type=literal_error, input_value='{refused}']")
    return _error(400, f"response_format '{refused}' is not supported by this model",
                  code="unsupported_value", param="response_format")


def _context_refusal(wanted: int, *, context: int, style: ServerStyle) -> Response:
    """A prompt longer than the context as ``style``'s server words it."""
    if style == "llama_cpp":
        body = {"error": {"code": 400, "message": "the request exceeds the available context "
                          "size, try increasing it", "type": "exceed_context_size_error",
                          "n_prompt_tokens": wanted, "n_ctx": context}}
        return JSONResponse(body, status_code=400)
    message = (f"This model's maximum context length is {context} tokens. However, you "
               f"requested {wanted} tokens. Please reduce the length of the messages.")
    if style == "vllm":
        return JSONResponse({"object": "error", "message": message, "type": "BadRequestError",
                             "param": None, "code": 400}, status_code=400)
    return _error(400, message, code="context_length_exceeded", param="messages")


def _refused_format(response_format: Any, *, config: SimConfig) -> str | None:
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    return kind if kind in config.refused_response_formats else None


def _read_chat_request(body: bytes) -> _ChatRequest:
    return _chat_request_of(_decode(body))


def _chat_request_of(payload: Any) -> _ChatRequest:
    if not isinstance(payload, dict):
        raise InvalidChatRequest("the request body must be a JSON object", code="invalid_json")
    if payload.get("stream"):
        raise InvalidChatRequest("stream=true is not supported by judge-sim", param="stream",
                                 code="unsupported_value")
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidChatRequest("you must provide a model parameter", param="model",
                                 code="missing_required_parameter")
    prompt = Prompt.from_messages(payload.get("messages"))
    response_format = payload.get("response_format")
    if response_format is not None and not isinstance(response_format, dict):
        raise InvalidChatRequest("'response_format' must be an object", param="response_format")
    max_tokens = payload.get("max_completion_tokens", payload.get("max_tokens"))
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool)
                                   or max_tokens < 1):
        raise InvalidChatRequest("'max_tokens' must be a positive integer", param="max_tokens")
    cache_key = payload.get("prompt_cache_key")
    if cache_key is not None and not isinstance(cache_key, str):
        raise InvalidChatRequest("'prompt_cache_key' must be a string", param="prompt_cache_key")
    return _ChatRequest(prompt, model, response_format, max_tokens, cache_key,
                        frozenset(payload), payload["messages"], offered_tools(payload),
                        _top_logprobs_of(payload))


def _top_logprobs_of(payload: dict[str, Any]) -> int | None:
    """The alternatives asked per token, as OpenAI reads ``logprobs`` and ``top_logprobs``."""
    asked, top = payload.get("logprobs"), payload.get("top_logprobs")
    if asked is not None and not isinstance(asked, bool):
        raise InvalidChatRequest("'logprobs' must be a boolean", param="logprobs")
    if top is not None and (not isinstance(top, int) or isinstance(top, bool)
                            or not 0 <= top <= MAX_TOP_LOGPROBS):
        raise InvalidChatRequest(f"'top_logprobs' must be an integer from 0 to "
                                 f"{MAX_TOP_LOGPROBS}", param="top_logprobs")
    if top is not None and not asked:
        raise InvalidChatRequest("'logprobs' must be true when 'top_logprobs' is set",
                                 param="top_logprobs")
    return (top or 0) if asked else None


async def _scripted(sim: SimState, chat: _ChatRequest, scripted: ScriptedReply) -> Response:
    if scripted.delay_ms is not None:
        await _sleep_ms(scripted.delay_ms)
    elif scripted.status != 429:
        await _sleep_ms(sample_latency_ms(sim.rng, config=sim.config))
    if scripted.status == 429 and scripted.code is None:
        wait_s = scripted.retry_after if scripted.retry_after is not None else (
            sim.config.retry_after_s)
        return _rate_limited(wait_s, message=scripted.message)
    if scripted.status != 200:
        message = scripted.message or (_SERVER_ERROR_MESSAGE if scripted.status >= 500
                                       else "scripted error")
        return _error(scripted.status, message, code=scripted.code)
    if scripted.content is None:
        content = build_reply(chat.prompt, model=chat.model, response_format=chat.response_format,
                              fault=Fault.none()).content
    else:
        content = scripted.content
    reply = reply_with(chat.prompt, content=content, finish_reason=scripted.finish_reason)
    return _completion(sim, chat, reply, cached_tokens=_serve_cache(sim, chat))


async def _sleep_ms(delay_ms: float) -> None:
    if delay_ms > 0:
        await asyncio.sleep(delay_ms / 1000)


async def _hang(request: Request, *, hang_s: float) -> bool:
    """Wait ``hang_s``, or less if the client gives up and closes the connection.

    Returns:
        True when the client left before the hang ended.
    """
    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(disconnected(), timeout=hang_s)
        return True
    return False


def _serve_cache(sim: SimState, chat: _ChatRequest) -> int | None:
    """The request's cached prompt tokens (None when the cache reports nothing), counted."""
    cached = (sim.prompt_cache.serve(chat.prompt.text, model=chat.model)
              if sim.config.prompt_cache else None)
    sim.counters.cache(key=chat.prompt_cache_key, cached_tokens=cached or 0,
                       prompt_tokens=estimate_tokens(chat.prompt.text))
    return cached


def _completion(sim: SimState, chat: _ChatRequest, reply: Reply, *,
                cached_tokens: int | None = None) -> Response:
    return JSONResponse(_completion_body(sim, chat, reply, cached_tokens=cached_tokens))


def _completion_body(sim: SimState, chat: _ChatRequest, reply: Reply, *,
                     cached_tokens: int | None = None) -> dict[str, Any]:
    usage = reply.usage
    details = ({"prompt_tokens_details": {"cached_tokens": cached_tokens}}
               if cached_tokens is not None else {})
    return {
        "id": f"chatcmpl-sim{next(sim.completion_ids):012d}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": chat.model,
        "system_fingerprint": sim.config.system_fingerprint,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": reply.content, "refusal": None},
            "logprobs": reply.logprobs,
            "finish_reason": reply.finish_reason,
        }],
        "usage": {"prompt_tokens": usage.prompt_tokens,
                  "completion_tokens": usage.completion_tokens,
                  "total_tokens": usage.total_tokens, **details},
    }


def _tool_completion(sim: SimState, chat: _ChatRequest, turn: ToolTurn) -> dict[str, Any]:
    content = turn.content or ""
    body = _completion_body(sim, chat, reply_with(chat.prompt, content=content))
    body["choices"][0]["message"] = {"role": "assistant", "content": turn.content,
                                     "refusal": None,
                                     **({"tool_calls": turn.tool_calls} if turn.tool_calls else {})}
    body["choices"][0]["finish_reason"] = turn.finish_reason
    return body


def _error(
    status: int, message: str, *, code: str | None = None, param: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    error_type = _ERROR_TYPES.get(status, "server_error" if status >= 500 else
                                  "invalid_request_error")
    body = {"error": {"message": message, "type": error_type, "param": param, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def _rate_limited(wait_s: float, *, message: str | None = None) -> Response:
    headers = {"retry-after": retry_after_header(wait_s),
               "retry-after-ms": str(max(0, round(wait_s * 1000)))}
    text = message or f"Rate limit reached for requests (judge-sim). Please try again in " \
                      f"{wait_s:.3g}s."
    return _error(429, text, code="rate_limit_exceeded", headers=headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return _error(exc.status_code, str(exc.detail), headers=exc.headers)


async def _models(request: Request) -> Response:
    sim: SimState = request.app.state.sim
    return JSONResponse({"object": "list", "data": [
        {"id": name, "object": "model", "created": 0, "owned_by": "judge-sim"}
        for name in sim.config.models
    ]})


async def _healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def _get_config(request: Request) -> Response:
    return JSONResponse(request.app.state.sim.config.as_json())


async def _put_config(request: Request) -> Response:
    sim: SimState = request.app.state.sim
    try:
        changes = _decode(await request.body())
        if not isinstance(changes, dict):
            raise InvalidSimConfig("expected a JSON object of settings")
        config = sim.configure(changes)
    except InvalidInput as exc:
        return _error(400, str(exc), code=_error_code(exc))
    return JSONResponse(config.as_json())


async def _post_script(request: Request) -> Response:
    sim: SimState = request.app.state.sim
    try:
        script = Script.parse(_decode(await request.body()))
    except InvalidInput as exc:
        return _error(400, str(exc), code=_error_code(exc))
    sim.script = script
    return JSONResponse({"rules": len(script.rules)})


def _decode(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        raise InvalidChatRequest("the request body is not valid JSON",
                                 code="invalid_json") from None


def _error_code(exc: InvalidInput) -> str:
    return exc.code if isinstance(exc, InvalidChatRequest) else "invalid_value"


async def _stats(request: Request) -> Response:
    sim: SimState = request.app.state.sim
    return JSONResponse({**sim.counters.as_json(), "batches": sim.batches.stats.as_json()})


async def _reset(request: Request) -> Response:
    request.app.state.sim.reset()
    return JSONResponse({"reset": True})


def _judge_line(sim: SimState, body: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
    """One batch line judged as a chat request is, less latency, rate limit and script;
    only the malformed and truncated faults apply, and a refused ``response_format`` fails
    the line as it fails a call."""
    try:
        chat = _chat_request_of(dict(body))
    except InvalidChatRequest as exc:
        return 400, {"error": {"message": str(exc), "type": "invalid_request_error",
                               "param": exc.param, "code": exc.code}}
    refused = _refused_format(chat.response_format, config=sim.config)
    if refused is not None:
        refusal = _format_refusal(refused, style=sim.config.server_style)
        return refusal.status_code, json.loads(bytes(refusal.body))
    sim.counters.prompt(chat.prompt.key)
    fault = decide_fault(sim.rng, config=sim.config)
    if fault.outcome not in ("malformed", "truncated"):
        fault = Fault.none()
    fault = first_answer_fault(chat.prompt.roles, config=sim.config) or fault
    reply = build_reply(chat.prompt, model=chat.model, response_format=chat.response_format,
                        fault=fault, max_tokens=chat.max_tokens,
                        shift=sim.config.score_shifts.get(chat.model, 0.0),
                        flip=chat.model in sim.config.flipped_answers,
                        profile=sim.config.judge_profiles.get(chat.model),
                        top_logprobs=chat.top_logprobs)
    sim.counters.answered(chat.prompt.key)
    # Batch lines are served from the prompt cache too (OpenAI reports and discounts
    # cached tokens of batch requests): the first line judged with a prefix fills it.
    return 200, _completion_body(sim, chat, reply, cached_tokens=_serve_cache(sim, chat))


def _batch_error(exc: BatchRequestError) -> Response:
    return _error(exc.status, str(exc), code=exc.code, param=exc.param)


def _read_upload(content_type: str, body: bytes) -> tuple[bytes, str, str]:
    """The file, its name and the purpose of a ``multipart/form-data`` upload.

    Raises:
        BatchRequestError: Not multipart, or the file or purpose part missing.
    """
    if not content_type.startswith("multipart/form-data"):
        raise BatchRequestError("expected a multipart/form-data upload")
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    parts: dict[str, tuple[bytes, str]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if isinstance(name, str) and isinstance(payload, bytes):
            parts[name] = (payload, part.get_filename() or "upload.jsonl")
    if "file" not in parts:
        raise BatchRequestError("the upload has no 'file' part", param="file")
    if "purpose" not in parts:
        raise BatchRequestError("the upload has no 'purpose' part", param="purpose")
    data, filename = parts["file"]
    return data, filename, parts["purpose"][0].decode(errors="replace").strip()


async def _upload_file(request: Request) -> Response:
    sim: SimState = request.app.state.sim
    sim.batches.stats.api_requests += 1
    try:
        data, filename, purpose = _read_upload(request.headers.get("content-type", ""),
                                               await request.body())
        stored = sim.batches.add_file(data, purpose=purpose, filename=filename,
                                      now=time.time(), config=sim.config)
    except BatchRequestError as exc:
        return _batch_error(exc)
    return JSONResponse(stored.as_json())


async def _get_file(request: Request) -> Response:
    sim: SimState = request.app.state.sim
    sim.batches.stats.api_requests += 1
    try:
        return JSONResponse(sim.batches.file(request.path_params["file_id"]).as_json())
    except BatchRequestError as exc:
        return _batch_error(exc)


async def _file_content(request: Request) -> Response:
    sim: SimState = request.app.state.sim
    sim.batches.stats.api_requests += 1
    try:
        stored = sim.batches.file(request.path_params["file_id"])
    except BatchRequestError as exc:
        return _batch_error(exc)
    return Response(stored.data, media_type="application/jsonl")


def _advanced(sim: SimState, batch_id: str) -> dict[str, Any]:
    batch = sim.batches.advance(sim.batches.batch(batch_id), now=time.time(),
                                judge=lambda body: _judge_line(sim, body), rng=sim.rng,
                                config=sim.config)
    return batch.as_json(time.time())


async def _create_batch(request: Request) -> Response:
    sim: SimState = request.app.state.sim
    sim.batches.stats.api_requests += 1
    try:
        payload = _decode(await request.body())
        if not isinstance(payload, dict):
            raise BatchRequestError("the request body must be a JSON object")
        batch = sim.batches.create(payload, now=time.time(), config=sim.config)
    except (BatchRequestError, InvalidChatRequest) as exc:
        return _error(getattr(exc, "status", 400), str(exc), param=getattr(exc, "param", None))
    return JSONResponse(batch.as_json(time.time()))


async def _get_batch(request: Request) -> Response:
    sim: SimState = request.app.state.sim
    sim.batches.stats.api_requests += 1
    try:
        return JSONResponse(_advanced(sim, request.path_params["batch_id"]))
    except BatchRequestError as exc:
        return _batch_error(exc)


async def _cancel_batch(request: Request) -> Response:
    sim: SimState = request.app.state.sim
    sim.batches.stats.api_requests += 1
    try:
        batch = sim.batches.batch(request.path_params["batch_id"])
    except BatchRequestError as exc:
        return _batch_error(exc)
    sim.batches.cancel(batch, now=time.time())
    return JSONResponse(batch.as_json(time.time()))


async def _list_batches(request: Request) -> Response:
    sim: SimState = request.app.state.sim
    sim.batches.stats.api_requests += 1
    raw_limit = request.query_params.get("limit", "20")
    if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= 100:
        return _error(400, "limit must be an integer from 1 to 100", param="limit")
    page = sim.batches.listing(after=request.query_params.get("after"),
                               limit=int(raw_limit) + 1)
    data = [_advanced(sim, b.id) for b in page[:int(raw_limit)]]
    return JSONResponse({"object": "list", "data": data,
                         "first_id": data[0]["id"] if data else None,
                         "last_id": data[-1]["id"] if data else None,
                         "has_more": len(page) > int(raw_limit)})
