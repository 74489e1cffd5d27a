"""The ingest service: an ASGI (Starlette) app that takes samples over HTTP.

``POST /v1/traces`` takes OpenTelemetry traces (OTLP/HTTP, protobuf or OTLP JSON):
bad spans are rejected by name in the answer's ``partial_success``, the others
buffered (in Redis when the fleet has one) until their trace is complete
(:mod:`producers.traces`).

``POST /v1/samples`` publishes every good record of a request (or counts it as
sampled out, shed or duplicate) and answers 202 when all were good, 422 naming
each bad record (index, id, field) when some were not; the good ones of that
request are accepted all the same, and the report says which. When the broker
is down it answers 503 for the whole request, so a client that retries loses
nothing. Blocking work
(screening, Redis, publishing) runs in a worker thread, never on the event loop.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from evalfleet.core.errors import InvalidTraces, RetryLater
from evalfleet.core.log import scrub
from producers import telemetry
from producers.ingest import traces as otlp_http
from producers.ingest.auth import check_bearer
from producers.ingest.body import Problem, build_report, parse_body
from producers.ingest.openapi import openapi_spec
from producers.pipeline import Pipeline
from producers.runtime import ProducerRuntime
from producers.traces import (
    Decoded,
    SpanLimits,
    decode_json,
    decode_protobuf,
    encode_response,
    encode_status,
)
from producers.traces.assembly import TraceAssembly

#: Seconds a client should wait before sending a request again after a 503.
RETRY_AFTER_S = 5

#: Most bytes of a body over the limit read (and thrown away) before answering 413: a
#: client that sends its whole body before reading the answer (Python's urllib) then
#: sees the 413 rather than a reset connection; past this the connection is dropped.
DRAIN_MAX_BYTES = 64 * 1024 * 1024


def create_app(
    runtime: ProducerRuntime, *, tokens: Sequence[str] | None, metrics: Sequence[str] | None,
    rate: float | None = None, traces: TraceAssembly | None = None,
) -> Starlette:
    """The ingest app over ``runtime``.

    Args:
        runtime: The producer runtime (settings, policy, publishing).
        tokens: Accepted bearer tokens; None turns authentication off.
        metrics: Metrics to produce for; None for those the sampling config lists.
        rate: A rate overriding the sampling config's.
        traces: Where ``POST /v1/traces`` puts spans; None answers it 404.

    Returns:
        The Starlette application.
    """
    service = _IngestService(runtime, tokens=tokens,
                             pipeline=runtime.pipeline(metrics=metrics, rate=rate,
                                                       source="ingest"), traces=traces)
    return Starlette(routes=[
        Route("/v1/samples", service.post_samples, methods=["POST"]),
        Route("/v1/traces", service.post_traces, methods=["POST"]),
        Route("/healthz", service.healthz, methods=["GET"]),
        Route("/readyz", service.readyz, methods=["GET"]),
        Route("/metrics", service.metrics, methods=["GET"]),
        Route("/openapi.json", service.openapi, methods=["GET"]),
    ])


class _IngestService:
    def __init__(self, runtime: ProducerRuntime, *, tokens: Sequence[str] | None,
                 pipeline: Pipeline, traces: TraceAssembly | None) -> None:
        self._runtime = runtime
        self._traces = traces
        settings = runtime.settings
        self._span_limits = SpanLimits(max_attributes=settings.ingest.otlp_max_attributes_per_span,
                                       max_value_bytes=settings.ingest.otlp_max_attribute_bytes)
        self._max_spans = settings.ingest.otlp_max_spans_per_request
        self._tokens = list(tokens) if tokens is not None else None
        self._pipeline = pipeline
        self._max_bytes = runtime.settings.ingest.ingest_max_request_bytes
        self._max_batch = runtime.settings.ingest.ingest_max_batch
        self._secrets = runtime.settings.secret_values()
        self._spec = openapi_spec()

    async def post_samples(self, request: Request) -> Response:
        problem = self._authenticate(request) or self._check_headers(request)
        if problem is not None:
            if problem.status == 413:
                await _drain(request)
            return _problem(problem)
        try:
            body = await self._read_body(request)
        except ClientDisconnect:
            return _problem(Problem(400, "the client went away before sending the whole body"))
        if isinstance(body, Problem):
            return _problem(body)
        records = parse_body(body, max_batch=self._max_batch)
        if isinstance(records, Problem):
            return _problem(records)
        try:
            results = await run_in_threadpool(self._pipeline.process, records)
        except RetryLater as exc:
            return _problem(Problem(503, f"{scrub(str(exc), self._secrets)}; nothing of this "
                                         "request was accepted, send it again"),
                            headers={"Retry-After": str(RETRY_AFTER_S)})
        report = build_report(results)
        if report["rejected"]:
            report["detail"] = (
                f"{report['rejected']} of {report['received']} records were rejected (see "
                f"rejections); the other {report['received'] - report['rejected']} were "
                "accepted")
            return _AsciiJSONResponse(report, status_code=422)
        return _AsciiJSONResponse(report, status_code=202)

    async def post_traces(self, request: Request) -> Response:
        media = otlp_http.media_type(request.headers)
        json_form = media != otlp_http.PROTOBUF
        problem = self._authenticate(request)
        if problem is None and self._traces is None:
            problem = Problem(404, "this ingest takes no traces")
        if problem is None and media is None:
            problem = Problem(415, "send OTLP as application/x-protobuf or application/json")
        if problem is None:
            problem = self._check_length(request)
        if problem is not None:
            if problem.status == 413:
                await _drain(request)
            return _status(problem, json_form=json_form)
        try:
            body = await self._read_body(request)
        except ClientDisconnect:
            body = Problem(400, "the client went away before sending the whole body")
        if not isinstance(body, Problem):
            body = otlp_http.decompress(body, encoding=request.headers.get("content-encoding"),
                                        max_bytes=self._max_bytes)
        if isinstance(body, Problem):
            return _status(body, json_form=json_form)
        return await run_in_threadpool(self._take_traces, body, json_form)

    def _take_traces(self, body: bytes, json_form: bool) -> Response:
        assert self._traces is not None
        decode = decode_json if json_form else decode_protobuf
        try:
            decoded: Decoded = decode(body, limits=self._span_limits, max_spans=self._max_spans)
        except InvalidTraces as exc:
            return _status(Problem(413 if exc.too_large else 400, str(exc)),
                           json_form=json_form)
        telemetry.OTLP_SPANS.labels("rejected").inc(len(decoded.rejections))
        try:
            over = self._traces.accept(decoded.spans)
        except RetryLater as exc:
            return _status(Problem(503, f"{scrub(str(exc), self._secrets)}; nothing of this "
                                        "request was kept, send it again"),
                           json_form=json_form, headers={"Retry-After": str(RETRY_AFTER_S)})
        content = encode_response(rejections=[*decoded.rejections, *over], json_form=json_form)
        return Response(content, status_code=200, media_type=(
            otlp_http.JSON if json_form else otlp_http.PROTOBUF))

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        try:
            await run_in_threadpool(self._runtime.enqueuer.ping)
        except RetryLater as exc:
            return JSONResponse({"status": "unavailable",
                                 "detail": scrub(str(exc), self._secrets)}, status_code=503)
        return JSONResponse({"status": "ready"})

    async def metrics(self, request: Request) -> Response:
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(self._spec)

    def _authenticate(self, request: Request) -> Problem | None:
        if self._tokens is None:
            return None
        result = check_bearer(request.headers.get("authorization"), tokens=self._tokens)
        return None if result.status == 200 else Problem(result.status, result.detail)

    def _check_headers(self, request: Request) -> Problem | None:
        content_type = request.headers.get("content-type", "application/json")
        media = content_type.split(";", 1)[0].strip().lower()
        if media != "application/json" and not media.endswith("+json"):
            return Problem(415, f"send the samples as application/json, not {media!r}")
        return self._check_length(request)

    def _check_length(self, request: Request) -> Problem | None:
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self._max_bytes:
            return Problem(413, self._too_large(int(length)))
        return None

    async def _read_body(self, request: Request) -> bytes | Problem:
        # Read in chunks and stop at the limit: a client that lies about (or omits)
        # Content-Length cannot make the service hold more than the limit.
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self._max_bytes:
                # The rest is read and thrown away (bounded) so the client sees the 413.
                if size <= DRAIN_MAX_BYTES:
                    continue
                return Problem(413, self._too_large(size, at_least=True))
            chunks.append(chunk)
        if size > self._max_bytes:
            return Problem(413, self._too_large(size))
        return b"".join(chunks)

    def _too_large(self, size: int, *, at_least: bool = False) -> str:
        what = "the request body" if at_least else f"a request body of {size:,} bytes"
        return (f"{what} is over the limit of {self._max_bytes:,} bytes "
                "(EVALFLEET_INGEST_MAX_REQUEST_BYTES); send smaller batches")


class _AsciiJSONResponse(JSONResponse):
    # Escaped to ASCII: a report quoting a client's text (an id, a key) holding a lone
    # surrogate would fail to encode as UTF-8 and turn the answer into a 500.
    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


async def _drain(request: Request) -> None:
    read = 0
    try:
        async for chunk in request.stream():
            read += len(chunk)
            if read > DRAIN_MAX_BYTES:
                return
    except ClientDisconnect:
        return


def _status(problem: Problem, *, json_form: bool,
            headers: dict[str, str] | None = None) -> Response:
    """An OTLP/HTTP error answer: a ``google.rpc.Status`` in the request's encoding."""
    response_headers = dict(headers or {})
    if problem.status == 401:
        response_headers["WWW-Authenticate"] = 'Bearer realm="evalfleet"'
    body = encode_status(code=otlp_http.GRPC_CODES.get(problem.status, 2),
                         message=problem.detail, json_form=json_form)
    return Response(body, status_code=problem.status, headers=response_headers,
                    media_type=otlp_http.JSON if json_form else otlp_http.PROTOBUF)


def _problem(problem: Problem, *, headers: dict[str, str] | None = None) -> Response:
    response_headers = dict(headers or {})
    if problem.status == 401:
        response_headers["WWW-Authenticate"] = 'Bearer realm="evalfleet"'
    body: dict[str, Any] = {"detail": problem.detail}
    return _AsciiJSONResponse(body, status_code=problem.status, headers=response_headers)
