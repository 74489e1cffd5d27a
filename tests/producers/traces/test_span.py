"""Spans as buffered: written and read back whole, also text orjson has no form for."""

from __future__ import annotations

from producers.traces import SpanLimits, decode_json
from producers.traces.span import Span
from tests.producers.traces.builders import json_request, json_span


def test_buffered_spans_read_back_as_they_were_decoded() -> None:
    body = json_request(
        json_span("eee19b7ec3c1b174", name="root", attributes={
            "n": 2**63 - 1, "ok": True, "m": {"k": [1.5, "x"]}, "text": "naïve 😀"}),
        # OTLP JSON may escape a lone surrogate, which UTF-8 cannot hold.
        json_span("eee19b7ec3c1b175", parent="eee19b7ec3c1b174", name="odd \ud800",
                  attributes={"gen_ai.prompt.0.content": "half \udc00 a pair"}))
    spans = decode_json(body, limits=SpanLimits(), max_spans=10).spans
    assert len(spans) == 2
    assert [Span.from_json(span.to_json()) for span in spans] == spans
    assert Span.list_from_json(b"[" + b",".join(s.to_json() for s in spans) + b"]") == spans
    assert Span.list_from_json(b"[" + spans[0].to_json() + b"]") == spans[:1]
