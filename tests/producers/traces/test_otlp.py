"""Decoding OTLP export requests: protobuf from the SDK's encoder, OTLP JSON, bad spans."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict
from google.rpc import status_pb2
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan

from evalfleet.core.errors import InvalidTraces
from producers.traces import (
    SpanLimits,
    decode_json,
    decode_protobuf,
    encode_response,
    encode_status,
)
from tests.producers.traces.builders import TRACE_ID, json_request, json_span, sdk_request

LIMITS = SpanLimits(max_attributes=8, max_value_bytes=1000, max_value_depth=3,
                    max_json_depth=4)


def test_protobuf_from_the_sdk_keeps_ids_names_attributes_and_resource() -> None:
    def build(tracer: Any) -> None:
        with tracer.start_as_current_span("rag") as root:
            root.set_attribute("http.route", "/chat")
            with tracer.start_as_current_span("llm") as llm:
                llm.set_attribute("llm.token_count.total", 12)
                llm.set_attribute("tags", ["a", "b"])
                llm.set_attribute("score", 0.5)

    decoded = decode_protobuf(sdk_request(build), limits=LIMITS, max_spans=10)
    assert decoded.rejections == []
    llm, root = decoded.spans
    assert root.is_root and root.name == "rag" and root.attributes == {"http.route": "/chat"}
    assert llm.parent_span_id == root.span_id and llm.trace_id == root.trace_id
    assert len(llm.trace_id) == 32 and len(llm.span_id) == 16
    assert llm.attributes == {"llm.token_count.total": 12, "tags": ["a", "b"], "score": 0.5}
    assert llm.resource["service.name"] == "support-bot"
    assert 0 < root.start_ns <= llm.start_ns <= llm.end_ns <= root.end_ns


def test_json_ids_are_hex_not_base64() -> None:
    body = json_request(json_span("eee19b7ec3c1b174", name="root", attributes={
        "n": 7, "ok": True, "m": {"k": [1, "x"]}}), json_span(
        "eee19b7ec3c1b175", parent="EEE19B7EC3C1B174", kind=3))
    decoded = decode_json(body, limits=LIMITS, max_spans=10)
    root, child = decoded.spans
    assert root.trace_id == TRACE_ID and root.span_id == "eee19b7ec3c1b174"
    assert child.parent_span_id == "eee19b7ec3c1b174" and child.kind == 3
    assert root.attributes == {"n": 7, "ok": True, "m": {"k": [1, "x"]}}
    assert (root.start_ns, root.end_ns) == (1_000, 2_000)


@pytest.mark.parametrize(("span", "field", "why"), [
    (json_span("eee19b7ec3c1b174", trace_id="W46/95gDgQPSabYzgT/GDA=="), "traceId",
     "hex, not base64"),
    (json_span("00" * 8), "spanId", "not all zero"),
    (json_span("eee19b7ec3c1b174", parent="xyz"), "parentSpanId", "16 hex digits"),
    (json_span("eee19b7ec3c1b174", kind=9), "kind", "0 to 5"),
    (json_span("eee19b7ec3c1b174", attributes={f"k{n}": n for n in range(9)}),
     "attributes", "more than 8 attributes"),
    (json_span("eee19b7ec3c1b174", attributes={"gen_ai.input.messages": "x" * 1001}),
     'attributes["gen_ai.input.messages"]', "over the limit of 1,000 bytes"),
    (json_span("eee19b7ec3c1b174", attributes={"gen_ai.input.messages": "[" * 5 + "]" * 5}),
     'attributes["gen_ai.input.messages"]', "JSON text nested deeper than 4 levels"),
    (json_span("eee19b7ec3c1b174", attributes={"deep": [[[["x"]]]]}), 'attributes["deep"]',
     "nested deeper than 3 levels"),
    ({**json_span("eee19b7ec3c1b174"), "startTimeUnixNano": "soon"}, "startTimeUnixNano",
     "nanoseconds"),
])
def test_a_bad_span_is_rejected_by_name_and_the_rest_kept(span: dict[str, Any], field: str,
                                                          why: str) -> None:
    decoded = decode_json(json_request(json_span("aaaaaaaaaaaaaaaa"), span), limits=LIMITS,
                          max_spans=10)
    assert [s.span_id for s in decoded.spans] == ["aaaaaaaaaaaaaaaa"]
    (rejection,) = decoded.rejections
    assert rejection.field == field and why in rejection.reason, rejection
    assert str(rejection).startswith("trace ")


def test_deep_json_bodies_and_bad_bodies_are_refused_as_a_whole() -> None:
    deep = b'{"resourceSpans": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    with pytest.raises(InvalidTraces, match="field resourceSpans: JSON nested deeper than 64"):
        decode_json(deep, limits=LIMITS, max_spans=10)
    with pytest.raises(InvalidTraces, match="not valid JSON"):
        decode_json(b"{nope", limits=LIMITS, max_spans=10)
    with pytest.raises(InvalidTraces, match="resourceSpans must be an array"):
        decode_json(b'{"resourceSpans": 5}', limits=LIMITS, max_spans=10)
    with pytest.raises(InvalidTraces, match="not an OTLP ExportTraceServiceRequest"):
        decode_protobuf(b"\xff\xff\xff", limits=LIMITS, max_spans=10)
    with pytest.raises(InvalidTraces, match="3 spans in one request") as too_many:
        decode_json(json_request(*(json_span(f"{n + 1:016x}") for n in range(3))),
                    limits=LIMITS, max_spans=2)
    assert too_many.value.too_large


def test_responses_carry_partial_success_in_the_request_encoding() -> None:
    decoded = decode_json(json_request(*(json_span("00" * 8) for _ in range(7))),
                          limits=LIMITS, max_spans=10)
    answer = ExportTraceServiceResponse.FromString(
        encode_response(rejections=decoded.rejections, json_form=False))
    assert answer.partial_success.rejected_spans == 7
    message = answer.partial_success.error_message
    assert message.startswith(f"7 span(s) rejected: trace {TRACE_ID}, span ?, field spanId")
    assert message.endswith("; and 2 more")
    as_json = json.loads(encode_response(rejections=decoded.rejections, json_form=True))
    assert as_json["partialSuccess"]["rejectedSpans"] == 7
    assert json.loads(encode_response(rejections=[], json_form=True)) == {}
    assert ExportTraceServiceResponse.FromString(
        encode_response(rejections=[], json_form=False)) == ExportTraceServiceResponse()
    status = status_pb2.Status.FromString(encode_status(code=3, message="bad",
                                                        json_form=False))
    assert (status.code, status.message) == (3, "bad")


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field, written out so nesting has no limit."""
    size, varint = len(payload), b""
    while True:
        byte, size = size & 0x7F, size >> 7
        varint += bytes([byte | (0x80 if size else 0)])
        if not size:
            return bytes([number << 3 | 2]) + varint + payload


@pytest.mark.parametrize(("levels", "rejected"), [(40, True), (5000, None)])
def test_protobuf_attribute_values_nested_deep(levels: int, rejected: bool | None) -> None:
    value = _field(1, b"x")  # AnyValue{string_value}
    for _ in range(levels):
        value = _field(5, _field(1, value))  # AnyValue{array_value{values: [value]}}
    span = (_field(1, b"\x01" * 16) + _field(2, b"\x02" * 8) + _field(5, b"s")
            + _field(9, _field(1, b"deep") + _field(2, value)))
    body = _field(1, _field(2, _field(2, span)))  # resource_spans.scope_spans.spans
    if rejected is None:  # past protobuf's own depth limit: the body is refused
        with pytest.raises(InvalidTraces, match="not an OTLP ExportTraceServiceRequest"):
            decode_protobuf(body, limits=LIMITS, max_spans=10)
        return
    (rejection,) = decode_protobuf(body, limits=LIMITS, max_spans=10).rejections
    assert rejection.field == 'attributes["deep"]'
    assert rejection.reason == "value nested deeper than 3 levels"


@pytest.mark.parametrize(("text", "kept"), [
    ("é" * 490, True),  # 980 bytes and the key's 4: within 1,000
    ("é" * 499, False),  # 499 characters, 998 bytes: over with the key
    ("\U0001F600" * 246, True),  # 250 characters with the key: no bytes counted
    ("\U0001F600" * 249, True),  # 996 bytes, counted
    ("\U0001F600" * 251, False),
])
def test_text_limits_count_utf8_bytes_in_both_encodings(text: str, kept: bool) -> None:
    def build(tracer: Any) -> None:
        with tracer.start_as_current_span("llm") as span:
            span.set_attribute("text", text)

    for decoded in (decode_protobuf(sdk_request(build), limits=LIMITS, max_spans=10),
                    decode_json(json_request(json_span("eee19b7ec3c1b174",
                                                       attributes={"text": text})),
                                limits=LIMITS, max_spans=10)):
        if kept:
            assert [s.attributes["text"] for s in decoded.spans] == [text]
        else:
            (rejection,) = decoded.rejections
            assert rejection.field == 'attributes["text"]'
            assert "over the limit of 1,000 bytes" in rejection.reason


def _result(document: str) -> dict[str, Any]:
    return {"timeUnixNano": "1500", "name": "db.query.result", "attributes": [
        {"key": "db.query.result.document", "value": {"stringValue": document}}]}


@pytest.mark.parametrize(("events", "field", "why"), [
    ([_result(str(n)) for n in range(129)], "events", "more than 128 db.query.result events"),
    ([_result("x" * 1001)], 'events[0].attributes["db.query.result.document"]',
     "over the limit of 1,000 bytes"),
    ("many", "events", "must be an array"),
    ([{"name": 7}], "events", "each event is"),
])
def test_query_result_events_are_kept_within_limits(events: Any, field: str, why: str) -> None:
    good = {**json_span("aaaaaaaaaaaaaaaa"), "events": [
        {"name": "exception", "attributes": []}, _result("Pauses last 3 months.")]}
    bad = {**json_span("eee19b7ec3c1b174"), "events": events}
    decoded = decode_json(json_request(good, bad), limits=SpanLimits(max_value_bytes=1000),
                          max_spans=10)
    (kept,) = decoded.spans
    assert kept.events == [{"name": "db.query.result", "attributes": {
        "db.query.result.document": "Pauses last 3 months."}}]
    (rejection,) = decoded.rejections
    assert rejection.field == field and why in rejection.reason, rejection


_KEYS = st.sampled_from(["gen_ai.input.messages", "route", *"mnopqrstuvw"])
_PLAIN = st.one_of(
    st.text(max_size=20).map(lambda t: AnyValue(string_value=t)),
    st.integers(-2**63, 2**63 - 1).map(lambda n: AnyValue(int_value=n)),
    st.booleans().map(lambda b: AnyValue(bool_value=b)),
    st.floats().map(lambda f: AnyValue(double_value=f)), st.just(AnyValue()))
# One attribute a span may add, each on or just past a limit of the test's SpanLimits
# (JSON text nesting 4, 1,000 bytes for a key and its value, values nested 2 deep).
_EDGES = [("input.value", "[" * n + "]" * n) for n in (4, 5, 9)] + [
    ("gen_ai.input.messages", '{"a": [[[[1]]]]}'), ("n", "é" * 249), ("n", "é" * 250),
    ("n", "é" * 498), ("n", "é" * 500), ("n", "x" * 998), ("n", "x" * 999),
    ("k" * 249, "x"), ("k" * 250, 7), ("k" * 1001, True), ("k" * 1001, 7), ("k" * 1001, "")]


def _edge(edge: tuple[str, Any]) -> tuple[str, AnyValue]:
    key, value = edge
    if isinstance(value, str):
        return key, AnyValue(string_value=value)
    if isinstance(value, bool):
        return key, AnyValue(bool_value=value)
    return key, AnyValue(int_value=value)


_EDGE = st.sampled_from(_EDGES).map(_edge)
_SPAN_ID = st.sampled_from([bytes([n]) * 8 for n in range(1, 8)] + [bytes(8), b"\x01" * 7])
_TRACE_ID = st.sampled_from([bytes([n]) * 16 for n in range(1, 8)] + [bytes(16), b"\x01"])


def _nested(depth: int) -> AnyValue:
    value = AnyValue(bytes_value=b"\x00\xff")
    for _ in range(depth):
        value = AnyValue(array_value=ArrayValue(values=[value]))
    return value


_NESTED = st.sampled_from([0, 1, 2, 3]).map(lambda depth: ("deep", _nested(depth)))


@st.composite
def _proto_span(draw: st.DrawFn) -> ProtoSpan:
    """A span mostly in the common form (well-formed ids, plain attributes), often with
    one attribute on an edge, sometimes with too many attributes or a kept event."""
    times = st.integers(0, 2**64 - 1)
    span = ProtoSpan(trace_id=draw(_TRACE_ID), span_id=draw(_SPAN_ID), parent_span_id=draw(
        st.one_of(st.just(b""), _SPAN_ID)), name=draw(st.text(max_size=8)),
        kind=draw(st.sampled_from(ProtoSpan.SpanKind.values())),
        start_time_unix_nano=draw(times), end_time_unix_nano=draw(times))
    pairs = draw(st.lists(st.tuples(_KEYS, _PLAIN), max_size=12, unique_by=lambda p: p[0]))
    pairs += draw(st.sampled_from([0, 1, 1, 1]).flatmap(lambda n: st.lists(
        st.one_of(_EDGE, _EDGE, _EDGE, _NESTED), min_size=n, max_size=n)))
    span.attributes.extend(KeyValue(key=key, value=value) for key, value in pairs)
    for name in draw(st.sampled_from([[], [], [], ["db.query.result"], ["exception"]])):
        span.events.add(name=name).attributes.add(key="db.query.result.document",
                                                  value=AnyValue(string_value="doc"))
    return span


def _as_otlp_json(request: ExportTraceServiceRequest) -> bytes:
    """The request in OTLP JSON: protobuf's JSON mapping with the ids turned to hex."""
    body = MessageToDict(request)
    for resource_spans in body.get("resourceSpans", []):
        for scope in resource_spans.get("scopeSpans", []):
            for span in scope.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(body).encode()


def _decoded_both_ways(spans: list[ProtoSpan]) -> tuple[Any, Any]:
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add()
    scope.resource.attributes.add(key="service.name", value=AnyValue(string_value="bot"))
    scope.scope_spans.add().spans.extend(spans)
    limits = SpanLimits(max_attributes=8, max_value_bytes=1000, max_value_depth=2,
                        max_json_depth=4)
    return (decode_protobuf(request.SerializeToString(), limits=limits, max_spans=10),
            decode_json(_as_otlp_json(request), limits=limits, max_spans=10))


def _assert_alike(from_protobuf: Any, from_json: Any) -> None:
    assert from_protobuf.spans == from_json.spans
    assert ([(r.trace_id, r.span_id, r.field) for r in from_protobuf.rejections]
            == [(r.trace_id, r.span_id, r.field) for r in from_json.rejections])


@pytest.mark.parametrize("edge", [*range(len(_EDGES)), "nested", "many", "event"])
def test_each_edge_of_the_common_form_decodes_alike_in_both_encodings(edge: Any) -> None:
    span = ProtoSpan(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="s")
    span.attributes.add(key="route", value=AnyValue(string_value="/chat"))
    if edge == "nested":
        span.attributes.add(key="deep", value=_nested(3))
    elif edge == "many":
        for n in range(8):
            span.attributes.add(key=f"k{n}", value=AnyValue(int_value=n))
    elif edge == "event":
        span.events.add(name="db.query.result").attributes.add(
            key="db.query.result.document", value=AnyValue(string_value="doc"))
    else:
        key, value = _edge(_EDGES[edge])
        span.attributes.add(key=key, value=value)
    _assert_alike(*_decoded_both_ways([span]))


@settings(max_examples=300, deadline=None)
@given(spans=st.lists(_proto_span(), min_size=1, max_size=4))
def test_protobuf_and_otlp_json_of_one_request_decode_alike(spans: list[ProtoSpan]) -> None:
    _assert_alike(*_decoded_both_ways(spans))
