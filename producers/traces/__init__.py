"""OpenTelemetry traces in: OTLP export requests decoded into spans, spans assembled per
trace, each trace mapped to samples.

    span.py     the span as kept between a request and its trace's sample
    otlp.py     OTLP/HTTP requests (protobuf, OTLP JSON) in, responses out
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
