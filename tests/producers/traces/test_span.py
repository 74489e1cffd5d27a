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


def test_events_are_buffered_and_a_span_buffered_without_them_reads_back() -> None:
    span = Span("5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174", "", "chroma.query",
                events=[{"name": "db.query.result",
                         "attributes": {"db.query.result.document": "doc"}}])
    assert Span.from_json(span.to_json()) == span
    older = b'["5b8efff798038103d269b633813fc60c","eee19b7ec3c1b174","","q",1,1,2,{},{}]'
    assert Span.list_from_json(b"[" + older + b"]")[0].events == []
