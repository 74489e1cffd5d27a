"""A span as evalfleet keeps it between an export request and its trace's sample. Pure.

OTLP spans are decoded (:mod:`producers.traces.otlp`) into :class:`Span` values that
hold only what the mapping reads: ids as lower-case hex, the name, kind, times, and
the span's and its resource's attributes as plain JSON values. A span that cannot be
kept is a :class:`SpanRejection` naming its trace, span, field and why.

Buffered spans are JSON written and read by orjson: in the bench's sweep, one
``json.loads`` per span was a fifth of the CPU. orjson refuses what has no UTF-8 form
(a lone surrogate, which an OTLP JSON body may hold as ``\\ud800``); such a span is
written with ``json`` instead (escaped), and read back by it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import orjson

#: Span events kept for the mapping: a vector store's query results (OpenLLMetry's
#: chromadb, pinecone, qdrant... instrumentations), one event per retrieved document.
KEPT_EVENTS = frozenset({"db.query.result"})

#: OTLP ``SpanKind`` values, by name (the enum's numbers are fixed by the protocol).
SPAN_KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer",
              5: "consumer"}


# Not frozen: a frozen dataclass sets each field through object.__setattr__, which made
# building the spans of a request and of a claimed trace a tenth of ingest's CPU. Nothing
# changes a span once built.
@dataclass(slots=True)
class Span:
    """One finished span of a trace."""

    trace_id: str
    """32 lower-case hex digits."""
    span_id: str
    """16 lower-case hex digits."""
    parent_span_id: str
    """The parent's span id; empty for a root span."""
    name: str
    """The span's name."""
    kind: int = 0
    """OTLP ``SpanKind`` (see :data:`SPAN_KINDS`)."""
    start_ns: int = 0
    """Start, nanoseconds since the epoch."""
    end_ns: int = 0
    """End, nanoseconds since the epoch."""
    attributes: dict[str, Any] = field(default_factory=dict)
    """The span's attributes as JSON values (arrays as lists, maps as dicts)."""
    resource: dict[str, Any] = field(default_factory=dict)
    """Its resource's attributes (``service.name``...)."""
    events: list[dict[str, Any]] = field(default_factory=list)
    """The events the mapping reads (see :data:`KEPT_EVENTS`), in order, each
    ``{"name": ..., "attributes": {...}}``; other events are not kept."""

    @property
    def is_root(self) -> bool:
        """True for the span that has no parent."""
        return not self.parent_span_id

    def to_json(self) -> bytes:
        """The span as compact JSON (how a trace's spans are buffered)."""
        fields = [self.trace_id, self.span_id, self.parent_span_id, self.name, self.kind,
                  self.start_ns, self.end_ns, self.attributes, self.resource, self.events]
        try:
            return orjson.dumps(fields)
        except TypeError:  # a lone surrogate: escaped by json
            return json.dumps(fields, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes | str) -> Span:
        """The span :meth:`to_json` wrote (one buffered before events were kept has
        none)."""
        return cls(*_loads(raw))

    @classmethod
    def list_from_json(cls, raw: bytes) -> list[Span]:
        """The spans of a JSON array of what :meth:`to_json` wrote (one decoding for a
        trace's spans, not one per span)."""
        return [cls(*fields) for fields in _loads(raw)]


def _loads(raw: bytes | str) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:  # an escaped lone surrogate (see the module docstring)
        return json.loads(raw)


@dataclass(frozen=True, slots=True)
class SpanRejection:
    """A span that was not kept, and why."""

    trace_id: str | None
    """Its trace id as hex, when readable."""
    span_id: str | None
    """Its span id as hex, when readable."""
    field: str
    """The offending field (``traceId``, ``attributes["gen_ai.input.messages"]``)."""
    reason: str
    """What is wrong, in words."""

    def __str__(self) -> str:
        return (f"trace {self.trace_id or '?'}, span {self.span_id or '?'}, "
                f"field {self.field}: {self.reason}")


@dataclass(frozen=True, slots=True)
class SpanLimits:
    """What one span of an export request may hold."""

    max_attributes: int = 512
    """Most attributes of a span (its resource's counted apart, against the same limit)."""
    max_value_bytes: int = 1_048_576
    """Largest attribute value: a string's UTF-8 bytes, or an array's or map's together."""
    max_value_depth: int = 8
    """Deepest nesting of arrays and maps inside one attribute value."""
    max_events: int = 128
    """Most kept events of a span (see :data:`KEPT_EVENTS`); their attributes are held
    to the limits of a span's."""
    max_json_depth: int = 32
    """Deepest nesting of the JSON text held by the attributes the mapping decodes
    (``gen_ai.input.messages``, ``input.value``...)."""
