"""OTLP/HTTP trace export requests in, ``ExportTraceServiceResponse`` out. Pure.

Two encodings of the same ``ExportTraceServiceRequest``:

- ``application/x-protobuf``, decoded by the ``opentelemetry-proto`` package;
- OTLP JSON (``application/json``), which is *not* protobuf's JSON mapping: trace and
  span ids are hex strings where ``json_format.Parse`` would read bytes fields as
  base64 and silently decode a trace id to other bytes. So the JSON is read through
  :func:`evalfleet.core.jsontext.loads` (its nesting measured in one linear pass before
  decoding, so a deep body is refused by name, never a ``RecursionError``) and walked
  here, ids converted from hex.

A body that cannot be read at all raises :class:`~evalfleet.core.errors.InvalidTraces`
(400, or 413 for too many spans); a span that cannot be kept becomes a
:class:`~producers.traces.span.SpanRejection` naming it, and the rest go on.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from evalfleet.core import jsontext
from evalfleet.core.errors import InvalidTraces
from producers.traces.span import KEPT_EVENTS, Span, SpanLimits, SpanRejection

#: Deepest nesting of an OTLP JSON body, in levels: a request is about 8 levels deep
#: before its attribute values, whose own nesting is limited per span.
MAX_BODY_DEPTH = 64

#: Rejected spans named in an answer's message; the count covers all of them.
MAX_NAMED_REJECTIONS = 5

#: Attributes whose value is JSON text the mapping decodes; their nesting is checked
#: here, so a deep one rejects its span by name at once.
JSON_TEXT_ATTRIBUTES = frozenset({
    "gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
    "gen_ai.retrieval.documents", "input.value", "output.value",
    "traceloop.entity.input", "traceloop.entity.output",
})

_KIND_NAMES = {"SPAN_KIND_UNSPECIFIED": 0, "SPAN_KIND_INTERNAL": 1, "SPAN_KIND_SERVER": 2,
               "SPAN_KIND_CLIENT": 3, "SPAN_KIND_PRODUCER": 4, "SPAN_KIND_CONSUMER": 5}
_HEX = frozenset("0123456789abcdef")
_ZERO_TRACE_ID = bytes(16)
_ZERO_SPAN_ID = bytes(8)

#: What ``scalar`` answers for a value that needs the budgeted walk.
_NESTED: Any = object()


@dataclass(frozen=True, slots=True)
class Decoded:
    """What one export request held."""

    spans: list[Span]
    """The spans kept, in request order."""
    rejections: list[SpanRejection]
    """The spans not kept, each named."""


def decode_protobuf(raw: bytes, *, limits: SpanLimits, max_spans: int) -> Decoded:
    """Decode an ``application/x-protobuf`` export request.

    Args:
        raw: The (decompressed) body.
        limits: What one span may hold.
        max_spans: Most spans in one request.

    Returns:
        The spans kept and the spans rejected.

    Raises:
        InvalidTraces: For a body that is not an export request, or one over ``max_spans``.
    """
    try:
        request = trace_service_pb2.ExportTraceServiceRequest.FromString(raw)
    except (DecodeError, RecursionError, ValueError) as exc:
        raise InvalidTraces(f"not an OTLP ExportTraceServiceRequest in protobuf: "
                            f"{exc}") from None
    _check_count(sum(len(scope.spans) for rs in request.resource_spans
                     for scope in rs.scope_spans), max_spans)
    out = Decoded([], [])
    for resource_spans in request.resource_spans:
        resource = _resource(_ProtoSpan.attributes(resource_spans.resource.attributes),
                             reader=_ProtoSpan, limits=limits)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                if isinstance(resource, _Problem) or not _take_plain(span, resource,
                                                                     limits=limits, out=out):
                    _collect(_ProtoSpan(span), resource, limits=limits, out=out)
    return out


def decode_json(raw: bytes, *, limits: SpanLimits, max_spans: int) -> Decoded:
    """Decode an OTLP JSON export request (hex ids, lowerCamelCase, integer enums).

    Args:
        raw: The (decompressed) body.
        limits: What one span may hold.
        max_spans: Most spans in one request.

    Returns:
        The spans kept and the spans rejected.

    Raises:
        InvalidTraces: For a body that is not OTLP JSON, one nested deeper than
            :data:`MAX_BODY_DEPTH`, or one over ``max_spans``.
    """
    try:
        data = jsontext.loads(raw, max_depth=MAX_BODY_DEPTH)
    except jsontext.JsonTooDeep as exc:
        where = f"field {exc.key}: " if exc.key else ""
        raise InvalidTraces(f"{where}JSON {exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidTraces(f"not valid JSON: {exc}") from None
    batches: list[tuple[Any, list[Any]]] = []
    for n, resource_spans in enumerate(_list(data, "resourceSpans", where="the body")):
        where = f"resourceSpans[{n}]"
        scopes = _list(resource_spans, "scopeSpans", where=where)
        spans = [span for m, scope in enumerate(scopes)
                 for span in _list(scope, "spans", where=f"{where}.scopeSpans[{m}]")]
        described = _dict(resource_spans.get("resource") or {}, f"{where}.resource")
        batches.append((described.get("attributes") or [], spans))
    _check_count(sum(len(spans) for _, spans in batches), max_spans)
    out = Decoded([], [])
    for attributes, spans in batches:
        resource = _resource(_JsonSpan.attributes(attributes), reader=_JsonSpan,
                             limits=limits)
        for span in spans:
            _collect(_JsonSpan(span), resource, limits=limits, out=out)
    return out


def encode_response(*, rejections: Sequence[SpanRejection], json_form: bool) -> bytes:
    """The ``ExportTraceServiceResponse`` of a request whose spans were taken.

    Args:
        rejections: The spans not kept; ``partial_success`` counts them and its message
            names the first :data:`MAX_NAMED_REJECTIONS`.
        json_form: Answer in OTLP JSON (else protobuf), as the request was sent.

    Returns:
        The body.
    """
    message = rejection_message(rejections)
    if json_form:
        body: dict[str, Any] = {}
        if rejections:
            body["partialSuccess"] = {"rejectedSpans": len(rejections),
                                      "errorMessage": message}
        return json.dumps(body, ensure_ascii=True).encode("ascii")
    response = trace_service_pb2.ExportTraceServiceResponse()
    if rejections:
        response.partial_success.rejected_spans = len(rejections)
        response.partial_success.error_message = message
    return response.SerializeToString()


def encode_status(*, code: int, message: str, json_form: bool) -> bytes:
    """A ``google.rpc.Status`` body, as OTLP/HTTP answers every 4xx and 5xx.

    Args:
        code: The gRPC status code (3 invalid argument, 14 unavailable...).
        message: What went wrong.
        json_form: Answer in JSON (else protobuf).
    """
    if json_form:
        return json.dumps({"code": code, "message": message}, ensure_ascii=True).encode()
    return status_pb2.Status(code=code, message=message).SerializeToString()


def rejection_message(rejections: Sequence[SpanRejection]) -> str:
    """``3 spans rejected: trace ..., span ..., field ...: why; ...`` (empty for none)."""
    if not rejections:
        return ""
    named = "; ".join(str(r) for r in rejections[:MAX_NAMED_REJECTIONS])
    more = len(rejections) - MAX_NAMED_REJECTIONS
    tail = f"; and {more} more" if more > 0 else ""
    return f"{len(rejections)} span(s) rejected: {named}{tail}"


class _Problem(ValueError):
    def __init__(self, field: str, reason: str) -> None:
        super().__init__(reason)
        self.field = field
        self.reason = reason


def _resource(pairs: Iterable[tuple[str, Any]], *, reader: type[_ProtoSpan | _JsonSpan],
              limits: SpanLimits) -> dict[str, Any] | _Problem:
    try:
        return _convert(pairs, limits=limits, reader=reader, where="resource.attributes")
    except _Problem as exc:
        return exc  # every span of this resource is rejected with it


def _take_plain(span: Any, resource: dict[str, Any], *, limits: SpanLimits,
                out: Decoded) -> bool:
    """Keep a protobuf span of the common form in one pass, or answer False.

    The common form: well-formed ids, no event, at most the attribute limit of string,
    integer, boolean and double values, each with its key within a quarter of the byte
    limit in characters (so within the limit in UTF-8) and JSON text within its depth.
    Anything else is left to :func:`_collect`, which reads every span and names what is
    wrong with one; for a span taken here both give the same :class:`Span` (a property
    test holds protobuf and OTLP JSON decoding equal). Reading a span through
    :class:`_ProtoSpan` cost four times the protobuf walk itself, most of ingest's CPU.
    """
    trace_id, span_id, parent = span.trace_id, span.span_id, span.parent_span_id
    attributes = span.attributes
    if (len(trace_id) != 16 or trace_id == _ZERO_TRACE_ID or len(span_id) != 8
            or span_id == _ZERO_SPAN_ID or (parent and (len(parent) != 8
                                                         or parent == _ZERO_SPAN_ID))
            or len(attributes) > limits.max_attributes or span.events):
        return False
    quick_chars = limits.max_value_bytes // 4
    converted: dict[str, Any] = {}
    for pair in attributes:
        key, value = pair.key, pair.value
        text = value.string_value  # most values are text: one read, no WhichOneof
        if text:
            if len(key) + len(text) > quick_chars:
                return False
            if key in JSON_TEXT_ATTRIBUTES:
                try:
                    jsontext.check_depth(text, max_depth=limits.max_json_depth)
                except jsontext.JsonTooDeep:
                    return False
            converted[key] = text
            continue
        other = _ProtoSpan.scalar(value)  # an empty text, a number, a flag or none
        if other is _NESTED or len(key) > quick_chars:
            return False
        converted[key] = other
    out.spans.append(Span(trace_id.hex(), span_id.hex(), parent.hex(), span.name, span.kind,
                          span.start_time_unix_nano, span.end_time_unix_nano, converted,
                          resource, []))
    return True


def _collect(span: _ProtoSpan | _JsonSpan, resource: dict[str, Any] | _Problem, *,
             limits: SpanLimits, out: Decoded) -> None:
    trace_id = span_id = None
    try:
        trace_id = span.id("traceId", 16)
        span_id = span.id("spanId", 8)
        parent = span.id("parentSpanId", 8, optional=True)
        if isinstance(resource, _Problem):
            raise resource
        out.spans.append(Span(
            trace_id=trace_id, span_id=span_id, parent_span_id=parent, name=span.name(),
            kind=span.kind(), start_ns=span.time("startTimeUnixNano"),
            end_ns=span.time("endTimeUnixNano"),
            attributes=_convert(span.attribute_pairs(), limits=limits, reader=type(span),
                                where="attributes"),
            resource=resource, events=_events(span, limits=limits),
        ))
    except _Problem as exc:
        out.rejections.append(SpanRejection(trace_id, span_id, exc.field, exc.reason))


def _convert(pairs: Iterable[tuple[str, Any]], *, limits: SpanLimits,
             reader: type[_ProtoSpan | _JsonSpan], where: str) -> dict[str, Any]:
    converted: dict[str, Any] = {}
    # A key and a text of this many characters together cannot pass the limit in UTF-8
    # (4 bytes a character at most): most attributes are taken without their bytes
    # counted nor a budget made, which was a third of decoding a request.
    quick_chars = limits.max_value_bytes // 4
    scalar, max_attributes, json_text = reader.scalar, limits.max_attributes, JSON_TEXT_ATTRIBUTES
    for key, raw in pairs:
        if len(converted) >= max_attributes:
            raise _Problem(where, f"more than {max_attributes} attributes")
        value = scalar(raw)
        if value is _NESTED or len(key) + (len(value) if type(value) is str else 0) > quick_chars:
            budget = _Budget(limits, where=where, key=key)
            budget.text(key)
            value = reader.value(raw, budget)
        if key in json_text and isinstance(value, str):
            try:
                jsontext.check_depth(value, max_depth=limits.max_json_depth)
            except jsontext.JsonTooDeep as exc:
                raise _Problem(_field_name(where, key), f"JSON text {exc}") from None
        converted[key] = value
    return converted


def _events(span: _ProtoSpan | _JsonSpan, *, limits: SpanLimits) -> list[dict[str, Any]]:
    """The span's events the mapping reads (:data:`KEPT_EVENTS`); the rest are dropped."""
    kept: list[dict[str, Any]] = []
    for n, (name, pairs) in enumerate(span.event_pairs()):
        if name not in KEPT_EVENTS:
            continue
        if len(kept) >= limits.max_events:
            raise _Problem("events", f"more than {limits.max_events} {name} events")
        kept.append({"name": name, "attributes": _convert(
            pairs, limits=limits, reader=type(span), where=f"events[{n}].attributes")})
    return kept


def _field_name(where: str, key: str) -> str:
    """An attribute as a rejection names it: ``attributes["gen_ai.input.messages"]``."""
    return f'{where}["{key[:64]}"]'


class _Budget:
    """Size and depth left for one attribute value."""

    def __init__(self, limits: SpanLimits, *, where: str, key: str) -> None:
        self.left = limits.max_value_bytes
        self.limits = limits
        self.where = where
        self.key = key

    @property
    def field(self) -> str:
        """The attribute, as a rejection names it (built only for one)."""
        return _field_name(self.where, self.key)

    def text(self, value: str) -> str:
        # isascii() reads a flag of the string: ASCII text is counted without encoding.
        self.left -= (len(value) if value.isascii()
                      else len(value.encode("utf-8", "surrogatepass")))
        if self.left < 0:
            raise _Problem(self.field, f"value over the limit of "
                                       f"{self.limits.max_value_bytes:,} bytes")
        return value

    def nest(self, depth: int) -> int:
        if depth >= self.limits.max_value_depth:
            raise _Problem(self.field, f"value nested deeper than "
                                       f"{self.limits.max_value_depth} levels")
        return depth + 1


def _check_count(count: int, max_spans: int) -> None:
    if count > max_spans:
        raise InvalidTraces(f"{count:,} spans in one request, over the limit of "
                            f"{max_spans:,} (EVALFLEET_OTLP_MAX_SPANS_PER_REQUEST); "
                            "export smaller batches", too_large=True)


class _ProtoSpan:
    def __init__(self, span: Any) -> None:
        self._span = span

    def id(self, field: str, size: int, *, optional: bool = False) -> str:
        raw = getattr(self._span, _SNAKE[field])
        if optional and not raw:
            return ""
        if len(raw) != size or not any(raw):
            raise _Problem(field, f"must be {size} bytes, not all zero (got {len(raw)})")
        return raw.hex()

    def name(self) -> str:
        return str(self._span.name)

    def kind(self) -> int:
        return int(self._span.kind)

    def time(self, field: str) -> int:
        return int(getattr(self._span, _SNAKE[field]))

    def attribute_pairs(self) -> Iterator[tuple[str, Any]]:
        return self.attributes(self._span.attributes)

    def event_pairs(self) -> Iterator[tuple[str, Iterator[tuple[str, Any]]]]:
        return ((event.name, self.attributes(event.attributes)) for event in self._span.events)

    @staticmethod
    def attributes(pairs: Any) -> Iterator[tuple[str, Any]]:
        return ((kv.key, kv.value) for kv in pairs)

    @staticmethod
    def scalar(value: Any) -> Any:
        """A string, integer, boolean or double value as is; :data:`_NESTED` for the
        rest, which :meth:`value` converts within a budget."""
        which = value.WhichOneof("value")
        if which == "string_value":
            return value.string_value
        if which == "int_value" or which == "bool_value":
            return getattr(value, which)
        if which == "double_value":
            return _finite(value.double_value)
        return None if which is None else _NESTED

    @classmethod
    def value(cls, value: Any, budget: _Budget, depth: int = 0) -> Any:
        which = value.WhichOneof("value")
        if which == "string_value":
            return budget.text(value.string_value)
        if which == "array_value":
            depth = budget.nest(depth)
            return [cls.value(item, budget, depth) for item in value.array_value.values]
        if which == "kvlist_value":
            depth = budget.nest(depth)
            return {budget.text(kv.key): cls.value(kv.value, budget, depth)
                    for kv in value.kvlist_value.values}
        if which == "bytes_value":
            return budget.text(bytes(value.bytes_value).hex())
        if which == "double_value":
            return _finite(value.double_value)
        return None if which is None else getattr(value, which)


class _JsonSpan:
    def __init__(self, span: Any) -> None:
        self._span = span if isinstance(span, dict) else {}
        self._is_object = isinstance(span, dict)

    def id(self, field: str, size: int, *, optional: bool = False) -> str:
        if not self._is_object:
            raise _Problem("span", "a span is a JSON object")
        raw = self._span.get(field, "")
        if optional and raw == "":
            return ""
        if (not isinstance(raw, str) or len(raw) != 2 * size or not set(raw.lower()) <= _HEX
                or not raw.strip("0")):
            shown = repr(raw)[:40] if isinstance(raw, str) else type(raw).__name__
            raise _Problem(field, f"must be {2 * size} hex digits, not all zero (got "
                                  f"{shown}; OTLP JSON ids are hex, not base64)")
        return raw.lower()

    def name(self) -> str:
        name = self._span.get("name", "")
        if not isinstance(name, str):
            raise _Problem("name", "must be a string")
        return name

    def kind(self) -> int:
        kind = self._span.get("kind", 0)
        if isinstance(kind, str) and kind in _KIND_NAMES:
            return _KIND_NAMES[kind]
        if not isinstance(kind, int) or isinstance(kind, bool) or kind not in range(6):
            raise _Problem("kind", "must be an integer SpanKind, 0 to 5")
        return kind

    def time(self, field: str) -> int:
        raw = self._span.get(field, 0)
        try:
            value = int(raw) if isinstance(raw, int | str) and not isinstance(raw, bool) else -1
        except ValueError:
            value = -1
        if not 0 <= value < 2**64:
            raise _Problem(field, "must be nanoseconds since the epoch (an integer)")
        return value

    def attribute_pairs(self) -> Iterator[tuple[str, Any]]:
        return self.attributes(self._span.get("attributes") or [])

    def event_pairs(self) -> Iterator[tuple[str, Iterator[tuple[str, Any]]]]:
        events = self._span.get("events") or []
        if not isinstance(events, list):
            raise _Problem("events", "must be an array of events")
        for event in events:
            if not isinstance(event, dict) or not isinstance(event.get("name", ""), str):
                raise _Problem("events", 'each event is {"name": string, "attributes": [...]}')
            yield event.get("name", ""), self.attributes(event.get("attributes") or [])

    @staticmethod
    def attributes(pairs: Any) -> Iterator[tuple[str, Any]]:
        if not isinstance(pairs, list):
            raise _Problem("attributes", "must be an array of {key, value}")
        for pair in pairs:
            if not isinstance(pair, dict) or not isinstance(pair.get("key"), str):
                raise _Problem("attributes", "each attribute is {\"key\": string, \"value\"}")
            yield pair["key"], pair.get("value")

    @staticmethod
    def scalar(value: Any) -> Any:
        """A ``stringValue`` or ``boolValue`` as is; :data:`_NESTED` for the rest, which
        :meth:`value` reads within a budget."""
        if isinstance(value, dict) and len(value) == 1:
            if isinstance(text := value.get("stringValue"), str):
                return text
            if isinstance(flag := value.get("boolValue"), bool):
                return flag
        return _NESTED

    @classmethod
    def value(cls, value: Any, budget: _Budget, depth: int = 0) -> Any:
        if not isinstance(value, dict) or not value:
            return None
        (which, raw), = list(value.items())[:1]
        if which == "stringValue" and isinstance(raw, str):
            return budget.text(raw)
        if which == "arrayValue" and isinstance(raw, dict):
            depth = budget.nest(depth)
            return [cls.value(item, budget, depth) for item in _items(raw, budget)]
        if which == "kvlistValue" and isinstance(raw, dict):
            depth = budget.nest(depth)
            return {budget.text(str(kv.get("key"))): cls.value(kv.get("value"), budget, depth)
                    for kv in _items(raw, budget) if isinstance(kv, dict)}
        if which == "boolValue" and isinstance(raw, bool):
            return raw
        if which == "intValue" and isinstance(raw, int | str) and not isinstance(raw, bool):
            return _int(raw, budget)
        if which == "doubleValue" and isinstance(raw, int | float | str):
            return _double(raw, budget)
        if which == "bytesValue" and isinstance(raw, str):
            return budget.text(_base64_hex(raw, budget))
        raise _Problem(budget.field, f"not an OTLP AnyValue ({which!r})")


def _items(raw: dict[str, Any], budget: _Budget) -> list[Any]:
    values = raw.get("values", [])
    if not isinstance(values, list):
        raise _Problem(budget.field, "values must be an array")
    return values


def _int(raw: int | str, budget: _Budget) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise _Problem(budget.field, "intValue is not an integer") from None
    if not -2**63 <= value < 2**63:
        raise _Problem(budget.field, "intValue is wider than 64 bits")
    return value


def _double(raw: float | str, budget: _Budget) -> float | str:
    try:
        return _finite(float(raw))
    except ValueError:
        raise _Problem(budget.field, "doubleValue is not a number") from None


def _finite(value: float) -> float | str:
    # NaN and the infinities have no JSON form: kept as their names.
    return value if math.isfinite(value) else str(value)


def _base64_hex(raw: str, budget: _Budget) -> str:
    try:
        return base64.b64decode(raw, validate=True).hex()
    except ValueError:
        raise _Problem(budget.field, "bytesValue is not base64") from None


def _list(data: Any, key: str, *, where: str) -> list[Any]:
    if not isinstance(data, dict):
        raise InvalidTraces(f"{where} must be a JSON object")
    value = data.get(key, [])
    if not isinstance(value, list):
        raise InvalidTraces(f"{where}: {key} must be an array")
    return value


def _dict(data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise InvalidTraces(f"{where} must be a JSON object")
    return data


_SNAKE = {"traceId": "trace_id", "spanId": "span_id", "parentSpanId": "parent_span_id",
          "startTimeUnixNano": "start_time_unix_nano",
          "endTimeUnixNano": "end_time_unix_nano"}
