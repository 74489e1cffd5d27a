"""OpenTelemetry traces in: OTLP export requests decoded into spans, spans assembled per
trace, each trace mapped to samples, traces grouped into conversations.

    span.py      the span as kept between a request and its trace's sample
    otlp.py      OTLP/HTTP requests (protobuf, OTLP JSON) in, responses out
    config.py    the sampling config's ``traces`` section
    mapping.py   one trace's spans to sample records (OpenInference, GenAI, OpenLLMetry)
    steps.py     one trace's spans to an agent trajectory (tool, agent and model spans)
    values.py    reading attribute values (indexed lists, JSON text), for both
    buffer/      where spans wait for their trace: Redis, or this process's memory
    assembly.py  the sampling decision, buffering, the sweep that produces due traces
    conversation.py  a trace's session id and end marker, its turn, a session's sample
    sessions/    where turns wait for their session to go quiet: Redis, or memory
    session_assembly.py  turns offered to sessions, the sweep that produces due versions
    scripts.py   running both Redis buffers' Lua scripts (errors mapped once)
    file.py      OTLP JSON lines (the Collector's file exporter) through the same
"""

from __future__ import annotations

from producers.traces.otlp import (
    Decoded,
    decode_json,
    decode_protobuf,
    encode_response,
    encode_status,
)
from producers.traces.span import Span, SpanLimits, SpanRejection

__all__ = ["Decoded", "Span", "SpanLimits", "SpanRejection", "decode_json", "decode_protobuf",
           "encode_response", "encode_status"]
