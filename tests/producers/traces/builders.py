"""Export requests for trace tests: OTLP JSON written as the Collector writes it, and
protobuf encoded by the OpenTelemetry SDK's own encoder from SDK spans."""

from __future__ import annotations

import json
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

TRACE_ID = "5b8efff798038103d269b633813fc60c"


def attribute(key: str, value: Any) -> dict[str, Any]:
    """One OTLP JSON ``KeyValue``."""
    return {"key": key, "value": any_value(value)}


def any_value(value: Any) -> dict[str, Any]:
    """An OTLP JSON ``AnyValue`` (ints as strings, as the Collector writes them)."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list):
        return {"arrayValue": {"values": [any_value(item) for item in value]}}
    if isinstance(value, dict):
        return {"kvlistValue": {"values": [attribute(k, v) for k, v in value.items()]}}
    return {"stringValue": value}


def json_span(span_id: str, *, trace_id: str = TRACE_ID, parent: str = "", name: str = "s",
              attributes: dict[str, Any] | None = None, start_ns: int = 1_000,
              end_ns: int = 2_000, kind: int = 1) -> dict[str, Any]:
    """One OTLP JSON span."""
    return {"traceId": trace_id, "spanId": span_id, "parentSpanId": parent, "name": name,
            "kind": kind, "startTimeUnixNano": str(start_ns), "endTimeUnixNano": str(end_ns),
            "attributes": [attribute(k, v) for k, v in (attributes or {}).items()],
            "status": {}}


def json_request(*spans: dict[str, Any], service: str = "support-bot") -> bytes:
    """An OTLP JSON ``ExportTraceServiceRequest`` holding ``spans`` under one resource."""
    return json.dumps({"resourceSpans": [{
        "resource": {"attributes": [attribute("service.name", service)]},
        "scopeSpans": [{"scope": {"name": "test"}, "spans": list(spans)}],
    }]}).encode()


def sdk_request(build: Any, *, service: str = "support-bot") -> bytes:
    """A protobuf export request of the spans ``build(tracer)`` records with the SDK."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    build(provider.get_tracer("test"))
    provider.shutdown()
    return encode_spans(exporter.get_finished_spans()).SerializeToString()
