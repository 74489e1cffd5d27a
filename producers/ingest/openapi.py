"""The OpenAPI 3.1 description of the ingest service, served at ``/openapi.json``.

Written by hand, except the sample's schema, which comes from the
:class:`~evalfleet.core.sample.Sample` model so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from evalfleet.core.sample import Sample

#: The API's version (not the package's): bumped on incompatible changes.
API_VERSION = "1.0.0"

_COUNT = {"type": "integer", "minimum": 0}

_REJECTION = {
    "type": "object",
    "required": ["index", "record", "id", "field", "error", "message"],
    "properties": {
        "index": {**_COUNT, "description": "Position of the record in the batch, from 0."},
        "record": {"type": "string", "description": "`sample` or `samples[N]`."},
        "id": {"type": ["string", "null"], "description": "The record's id, when readable."},
        "field": {"type": ["string", "null"],
                  "description": "Path of the offending field (`context[3]`), or null."},
        "error": {"type": "string", "description": "What is wrong with it."},
        "message": {"type": "string", "description": "Record, id, field and error in one line."},
    },
}

_REPORT = {
    "type": "object",
    "required": ["received", "accepted", "sampled_out", "shed", "duplicates", "rejected",
                 "jobs", "rejections"],
    "properties": {
        "received": {**_COUNT, "description": "Records in the request; the sum of the next five."},
        "accepted": {**_COUNT, "description": "Records with at least one job published."},
        "sampled_out": {**_COUNT, "description": "Valid records no metric's sampling kept."},
        "shed": {**_COUNT, "description": "Records whose jobs were all shed: queue over its "
                                          "limit (counted per metric and segment)."},
        "duplicates": {**_COUNT, "description": "Records already enqueued within the "
                                                "deduplication window."},
        "rejected": {**_COUNT, "description": "Records that are invalid or lack every picked "
                                              "metric's inputs."},
        "jobs": {"type": "object", "additionalProperties": _COUNT,
                 "description": "Jobs published, per metric."},
        "rejections": {"type": "array", "items": {"$ref": "#/components/schemas/Rejection"},
                       "description": "Every error, with the record it belongs to."},
        "detail": {"type": "string", "description": "Present when nothing was accepted."},
    },
}

_PROBLEM = {
    "type": "object",
    "required": ["detail"],
    "properties": {"detail": {"type": "string", "description": "What went wrong."}},
}

_STATUS = {
    "type": "object",
    "required": ["status"],
    "properties": {
        "status": {"type": "string", "enum": ["ok", "ready", "unavailable"]},
        "detail": {"type": "string", "description": "Why not ready."},
    },
}


def openapi_spec() -> dict[str, Any]:
    """The OpenAPI document of the ingest service."""
    # The trajectory's models become schemas of their own beside Sample (pydantic nests
    # them under "$defs", whose "#/$defs/..." references would point at the document root).
    sample = Sample.model_json_schema(ref_template="#/components/schemas/{model}")
    nested = sample.pop("$defs", {})
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "evalfleet ingest",
            "version": API_VERSION,
            "description": "Send production samples to evalfleet. Each is validated, "
                           "sampled, redacted and published to its metric queues; 202 "
                           "lists what became of every record.",
        },
        "paths": {
            "/v1/samples": {"post": _post_samples()},
            "/v1/traces": {"post": _post_traces()},
            "/healthz": {"get": _probe("Liveness: the process answers.", ready=False)},
            "/readyz": {"get": _probe("Readiness: the broker is reachable.", ready=True)},
            "/metrics": {"get": {
                "summary": "Prometheus metrics (evalfleet_producer_*).",
                "operationId": "metrics",
                "responses": {"200": {"description": "Prometheus text format.",
                                      "content": {"text/plain": {"schema": {"type": "string"}}}}},
            }},
        },
        "components": {
            "schemas": {
                "Sample": sample,
                **nested,
                "Batch": {
                    "type": "object", "required": ["samples"], "additionalProperties": False,
                    "properties": {"samples": {"type": "array", "minItems": 1,
                                               "items": {"$ref": "#/components/schemas/Sample"}}},
                },
                "IngestReport": _REPORT,
                "Rejection": _REJECTION,
                "Problem": _PROBLEM,
                "Status": _STATUS,
                "ExportTraceServiceResponse": _EXPORT_RESPONSE,
                "RpcStatus": _RPC_STATUS,
            },
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _post_samples() -> dict[str, Any]:
    return {
        "summary": "Submit one sample or a batch.",
        "operationId": "postSamples",
        "security": [{"bearer": []}],
        "requestBody": {"required": True, "content": {"application/json": {"schema": {"oneOf": [
            {"$ref": "#/components/schemas/Sample"},
            {"$ref": "#/components/schemas/Batch"},
            {"type": "array", "minItems": 1, "items": {"$ref": "#/components/schemas/Sample"}},
        ]}}}},
        "responses": {
            "202": _json("Every record was good and is published (or sampled out, shed "
                         "or a duplicate): counts per outcome.", "IngestReport"),
            "400": _json("The body is not JSON.", "Problem"),
            "401": _json("No bearer token, or a malformed Authorization header.", "Problem"),
            "403": _json("The token is not accepted.", "Problem"),
            "413": _json("The body or the batch is over its limit.", "Problem"),
            "415": _json("The body is not application/json.", "Problem"),
            "422": _json("Some records are bad: each is named (index, id, field) in "
                         "rejections; the good records of the request are accepted all the "
                         "same and counted. Also: the body holds no samples.",
                         "IngestReport"),
            "503": _json("The broker is unreachable: nothing of the request was accepted; "
                         "send it again.", "Problem"),
        },
    }


_EXPORT_RESPONSE = {
    "type": "object",
    "description": "OTLP's ExportTraceServiceResponse (OTLP JSON; protobuf for a protobuf "
                   "request).",
    "properties": {"partialSuccess": {"type": "object", "properties": {
        "rejectedSpans": {**_COUNT, "description": "Spans not kept."},
        "errorMessage": {"type": "string",
                         "description": "The first rejected spans: trace, span, field, why."},
    }}},
}

_RPC_STATUS = {
    "type": "object",
    "description": "google.rpc.Status, as OTLP/HTTP answers errors (protobuf for a protobuf "
                   "request).",
    "properties": {"code": {"type": "integer"}, "message": {"type": "string"}},
}


def _post_traces() -> dict[str, Any]:
    def answer(description: str, schema: str) -> dict[str, Any]:
        ref = {"schema": {"$ref": f"#/components/schemas/{schema}"}}
        return {"description": description, "content": {
            "application/json": ref, "application/x-protobuf": {"schema": {"type": "string"}}}}

    body = {"schema": {"type": "string", "description": "ExportTraceServiceRequest"}}
    return {
        "summary": "OpenTelemetry traces (OTLP/HTTP): spans assembled per trace, each trace "
                   "produced as a sample.",
        "operationId": "postTraces",
        "security": [{"bearer": []}],
        "requestBody": {"required": True, "content": {
            "application/x-protobuf": body, "application/json": body}},
        "responses": {
            "200": answer("The spans were taken; bad ones are counted and named in "
                          "partialSuccess.", "ExportTraceServiceResponse"),
            "400": answer("The body is not an export request.", "RpcStatus"),
            "401": answer("No bearer token, or a malformed Authorization header.", "RpcStatus"),
            "403": answer("The token is not accepted.", "RpcStatus"),
            "413": answer("The body (also decompressed) or its span count is over its limit.",
                          "RpcStatus"),
            "415": answer("Another content type or content encoding.", "RpcStatus"),
            "503": answer("Too many traces open, or Redis unreachable: nothing was kept; send "
                          "it again after Retry-After.", "RpcStatus"),
        },
    }


def _probe(summary: str, *, ready: bool) -> dict[str, Any]:
    responses = {"200": _json("OK.", "Status")}
    if ready:
        responses["503"] = _json("Not ready: the broker is unreachable.", "Status")
    return {"summary": summary, "operationId": "readyz" if ready else "healthz",
            "responses": responses}


def _json(description: str, schema: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{schema}"}}}}
