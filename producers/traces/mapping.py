"""From one trace's spans to sample records. Pure.

Each span is read in the first convention it matches (see ``docs/traces.md`` for the
table): OpenInference (``openinference.span.kind``), OTel GenAI (``gen_ai.*`` messages
and ``gen_ai.operation.name``), OpenLLMetry (``gen_ai.prompt.N.*``,
``traceloop.entity.*``). A read span gives a question, an answer, retrieved documents,
a model and a prompt version, each when it carries them.

A trace becomes one sample, id the trace id, judged on its root span when that carries a
question and an answer, else on its last LLM span, with the trace's trajectory when it
has a tool or an agent (:mod:`producers.traces.steps`); or, with a span selector
(``traces.judge``), one sample per selected span, id ``<trace id>:<span id>``. Either
way the context is the documents of the trace's retrieval spans in start order, and the
sampling key is the trace id, so all samples of a trace share its sampling decision.
Every step is linear in the spans' attributes; JSON text is decoded through
:func:`evalfleet.core.jsontext.loads_strict` (orjson: the attributes' JSON was most of
the mapping's CPU).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from producers.traces.config import SpanSelector, TraceSpec
from producers.traces.span import SPAN_KINDS, Span
from producers.traces.steps import build_trajectory, first_agent
from producers.traces.values import as_list as _as_list
from producers.traces.values import indexed
from producers.traces.values import json_value as _json
from producers.traces.values import text as _text

#: Flattened list attributes read (``prefix.N.rest``: OpenInference, OpenLLMetry).
_PREFIXES = ("llm.input_messages", "llm.output_messages", "retrieval.documents",
             "gen_ai.prompt", "gen_ai.completion")


@dataclass(slots=True)  # not frozen, as Span (one per span per sweep)
class SpanReading:
    """What one span says, in whichever convention it speaks."""

    convention: str | None
    """``openinference``, ``genai``, ``openllmetry``, or None for none."""
    question: str | None = None
    """The last user message (or the span's input text)."""
    answer: str | None = None
    """The answer (first output message, or the span's output text)."""
    documents: list[str] | None = None
    """Retrieved document texts, for a retrieval span."""
    model: str | None = None
    """The model that answered."""
    prompt_version: str | None = None
    """The prompt template's version."""
    is_llm: bool = False
    """True for a model call."""
    kinds: frozenset[str] = field(default_factory=frozenset)
    """Its kinds for a span selector: OTLP kind, OpenInference kind, GenAI operation."""


@dataclass(frozen=True, slots=True)
class MappedSample:
    """A sample record built from a trace, with the key its sampling is decided on."""

    record: dict[str, Any]
    """The sample record (the JSON form ``POST /v1/samples`` takes)."""
    sampling_key: str
    """The trace id."""


@dataclass(frozen=True, slots=True)
class TraceMapping:
    """What a trace gave: its samples, or why none."""

    samples: list[MappedSample]
    """The samples, in span order."""
    reason: str | None = None
    """Why there is none (``no_question``, ``no_answer``...)."""


def map_trace(spans: Sequence[Span], *, spec: TraceSpec) -> TraceMapping:
    """The samples of one trace.

    Args:
        spans: Every span of the trace (any order; duplicates by span id are ignored).
        spec: The ``traces`` section of the sampling config.

    Returns:
        The samples, or none with the reason.
    """
    ordered = sorted({s.span_id: s for s in spans}.values(),
                     key=lambda s: (s.start_ns, s.end_ns))
    # Every span is read without its messages (the JSON text that costs); only the
    # spans that may be judged are read whole.
    readings = [read_span(span, messages=False) for span in ordered]
    context = [text for r in readings if r.documents for text in r.documents]
    root = next((s for s in ordered if s.is_root), None)
    if spec.judge is not None:
        picked = [(s, read_span(s)) for s, r in zip(ordered, readings, strict=True)
                  if _selects(spec.judge, s, r)]
        if not picked:
            return TraceMapping([], "no_selected_span")
    else:
        judged = _default_judged(ordered, readings, root=root)
        if isinstance(judged, str):
            return TraceMapping([], judged)
        picked = [judged]
    samples = []
    for span, reading in picked:
        if not reading.question or not reading.answer:
            continue
        sample_id = span.trace_id if spec.judge is None else f"{span.trace_id}:{span.span_id}"
        record = _record(sample_id, span, reading, root=root, spans=ordered,
                         readings=readings, context=context, spec=spec)
        if spec.judge is None:
            trajectory = build_trajectory(ordered, final_answer=reading.answer,
                                          documents=[r.documents for r in readings])
            if trajectory is not None:
                record["trajectory"] = trajectory.model_dump(mode="json")
                agent = first_agent(ordered)
                if agent is not None:  # a segment, unless traces.segments names one
                    record["attributes"].setdefault("agent", agent)
        samples.append(MappedSample(record, sampling_key=span.trace_id))
    return TraceMapping(samples, None if samples else "no_question_or_answer")


def read_span(span: Span, *, messages: bool = True) -> SpanReading:
    """Read ``span`` in the first convention it matches (OpenInference, OTel GenAI,
    OpenLLMetry).

    Args:
        span: The span.
        messages: Read its question and answer too (False leaves them None).
    """
    attributes = span.attributes
    kinds = {SPAN_KINDS.get(span.kind, "unspecified")}
    if span.events and (documents := _event_documents(span.events)):
        # A vector store's query span (OpenLLMetry): one event per retrieved document.
        return SpanReading("openllmetry", documents=documents, kinds=frozenset(kinds))
    if "openinference.span.kind" in attributes:
        return _openinference(attributes, kinds, messages=messages)
    if "gen_ai.operation.name" in attributes or "gen_ai.input.messages" in attributes:
        return _genai(attributes, kinds, messages=messages)
    if any(k.startswith(("gen_ai.prompt.", "traceloop.")) for k in attributes):
        return _openllmetry(attributes, kinds, messages=messages)
    return SpanReading(None, kinds=frozenset(kinds))


def _openinference(attributes: Mapping[str, Any], kinds: set[str], *,
                   messages: bool) -> SpanReading:
    kind = str(attributes["openinference.span.kind"]).upper()
    if kind == "RETRIEVER":
        documents = [_text(d.get("document.content"))
                     for d in _indexed(attributes)["retrieval.documents"]]
        return SpanReading("openinference", question=_value_text(attributes, "input"),
                           documents=[d for d in documents if d], kinds=frozenset({*kinds, kind}))
    model = _text(attributes.get("llm.model_name"))
    version = _text(attributes.get("llm.prompt_template.version"))
    if not messages:
        return SpanReading("openinference", model=model, prompt_version=version,
                           is_llm=kind == "LLM", kinds=frozenset({*kinds, kind}))
    lists = _indexed(attributes)
    question = _last_user(lists["llm.input_messages"], role="message.role",
                          content="message.content")
    answer = _first_content(lists["llm.output_messages"], content="message.content")
    request = _json(attributes.get("input.value")) if kind == "LLM" else None
    if question is None and isinstance(request, dict):
        question = _last_user(_as_list(request.get("messages")), role="role", content="content")
    return SpanReading(
        "openinference", question=question or _value_text(attributes, "input"),
        answer=answer or _value_text(attributes, "output"), model=model,
        prompt_version=version, is_llm=kind == "LLM", kinds=frozenset({*kinds, kind}))


def _genai(attributes: Mapping[str, Any], kinds: set[str], *, messages: bool) -> SpanReading:
    operation = _text(attributes.get("gen_ai.operation.name")) or ""
    kinds = {*kinds, operation}
    if operation == "retrieval" or "gen_ai.retrieval.documents" in attributes:
        documents = [_document_text(d) if isinstance(d, dict) else None
                     for d in _as_list(_json(attributes.get("gen_ai.retrieval.documents")))]
        return SpanReading("genai", question=_text(attributes.get("gen_ai.retrieval.query.text")),
                           documents=[d for d in documents if d], kinds=frozenset(kinds))
    model = _text(attributes.get("gen_ai.response.model")
                  or attributes.get("gen_ai.request.model"))
    is_llm = (operation in ("chat", "text_completion", "generate_content")
              or "gen_ai.output.messages" in attributes)
    if not messages:
        return SpanReading("genai", model=model, is_llm=is_llm, kinds=frozenset(kinds))
    inputs = _as_list(_json(attributes.get("gen_ai.input.messages")))
    outputs = _as_list(_json(attributes.get("gen_ai.output.messages")))
    return SpanReading(
        "genai", question=_last_user(inputs, role="role", content="parts"),
        answer=_first_content(outputs, content="parts"), model=model, is_llm=is_llm,
        kinds=frozenset(kinds))


def _openllmetry(attributes: Mapping[str, Any], kinds: set[str], *,
                 messages: bool) -> SpanReading:
    entity = _text(attributes.get("traceloop.span.kind"))
    name = _text(attributes.get("traceloop.entity.name")) or ""
    if "retriev" in name.lower():
        # A retriever decorated with traceloop-sdk's @task: its output is the documents.
        documents = [_document_text(d) for d in
                     _as_list(_json(attributes.get("traceloop.entity.output")))]
        return SpanReading("openllmetry",
                           question=_entity_text(attributes.get("traceloop.entity.input")),
                           documents=[d for d in documents if d],
                           kinds=frozenset({*kinds, *([entity] if entity else [])}))
    lists = _indexed(attributes)
    reading = SpanReading(
        "openllmetry", model=_text(attributes.get("gen_ai.response.model")
                                   or attributes.get("gen_ai.request.model")),
        prompt_version=_text(attributes.get("traceloop.prompt.version")),
        is_llm=bool(lists["gen_ai.completion"] or lists["gen_ai.prompt"]),
        kinds=frozenset({*kinds, *([entity] if entity else [])}))
    if not messages:
        return reading
    question = _last_user(lists["gen_ai.prompt"], role="role", content="content")
    answer = _first_content(lists["gen_ai.completion"], content="content")
    return replace(
        reading, question=question or _entity_text(attributes.get("traceloop.entity.input")),
        answer=answer or _entity_text(attributes.get("traceloop.entity.output")))


def _default_judged(spans: Sequence[Span], readings: Sequence[SpanReading], *,
                    root: Span | None) -> tuple[Span, SpanReading] | str:
    if root is not None:
        reading = read_span(root)
        if reading.question and reading.answer:
            return root, reading
    llm = [s for s, r in zip(spans, readings, strict=True) if r.is_llm]
    if not llm:
        return "no_llm_span"
    last = max(llm, key=lambda span: span.end_ns)
    return last, read_span(last)


def _selects(selector: SpanSelector, span: Span, reading: SpanReading) -> bool:
    if selector.name is not None and span.name not in selector.name:
        return False
    if selector.kind is not None and not reading.kinds & set(selector.kind):
        return False
    if selector.service is not None and span.resource.get("service.name") not in selector.service:
        return False
    return all(_text(span.attributes.get(k)) == v for k, v in selector.attributes.items())


def _record(sample_id: str, span: Span, reading: SpanReading, *, root: Span | None,
            spans: Sequence[Span], readings: Sequence[SpanReading], context: list[str],
            spec: TraceSpec) -> dict[str, Any]:
    owners = [span, *([root] if root is not None else []), *spans]
    segments: dict[str, str] = {}
    app = _text(span.resource.get("service.name"))
    if app:
        segments["app"] = app
    route = root and (_text(root.attributes.get("http.route")) or _text(root.name))
    if route:
        segments["route"] = route
    model = reading.model or _last(r.model for r in readings if r.is_llm)
    version = reading.prompt_version or _last(r.prompt_version for r in readings)
    segments.update({k: v for k, v in (("model", model), ("prompt_version", version)) if v})
    for name, attribute in spec.segments.items():
        value = _lookup(owners, attribute)
        if value is not None:
            segments[name] = value if isinstance(value, str) else str(value)
    fields: dict[str, Any] = {"trace_id": span.trace_id}
    for name, attribute in spec.fields.items():
        value = _lookup(owners, attribute)
        if value is not None:
            fields[name] = value
    reference = _lookup(owners, spec.reference) if spec.reference else None
    return {
        "id": sample_id, "timestamp": _timestamp(span.end_ns), "input": reading.question,
        "output": reading.answer, "context": context,
        "reference": reference if isinstance(reference, str) else None,
        "attributes": segments, "fields": fields,
    }


def _lookup(spans: Sequence[Span], attribute: str) -> Any:
    """An attribute's value on the first span that has it, then on its resource; a
    ``metadata.KEY`` name also reads OpenInference's ``metadata`` JSON."""
    for span in spans:
        for source in (span.attributes, span.resource):
            if attribute in source:
                return source[attribute]
    if attribute.startswith("metadata."):
        for span in spans:
            metadata = _json(span.attributes.get("metadata"))
            if isinstance(metadata, dict) and attribute[9:] in metadata:
                return metadata[attribute[9:]]
    return None


def _indexed(attributes: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """``prefix.N.rest`` attributes as one list of ``{rest: value}`` per prefix, by N."""
    return indexed(attributes, _PREFIXES)


def _last_user(messages: Sequence[Any], *, role: str, content: str) -> str | None:
    # The last user message with text: a tool's response may come as a user message
    # holding only a tool-call-response part (pydantic-ai).
    for message in reversed(messages):
        if isinstance(message, dict) and message.get(role) == "user":
            text = _content_text(message.get(content))
            if text:
                return text
    return None


def _first_content(messages: Sequence[Any], *, content: str) -> str | None:
    for message in messages:
        if isinstance(message, dict):
            text = _content_text(message.get(content))
            if text:
                return text
    return None


def _content_text(content: Any) -> str | None:
    """Text of a message's content: a string, or GenAI ``parts`` / OpenAI content parts."""
    if isinstance(content, str):
        return content
    parts = [part.get("content") or part.get("text") for part in _as_list(content)
             if isinstance(part, dict) and part.get("type", "text") == "text"]
    text = "\n".join(p for p in parts if isinstance(p, str))
    return text or None


def _value_text(attributes: Mapping[str, Any], prefix: str) -> str | None:
    """``input.value`` / ``output.value``: text as is; JSON holding one string, that
    string; an OpenAI response, its first choice's message."""
    raw = _text(attributes.get(f"{prefix}.value"))
    if raw is None or "json" not in str(attributes.get(f"{prefix}.mime_type", "")):
        return raw
    value = _json(raw)
    if isinstance(value, dict):
        choices = _as_list(value.get("choices"))
        if choices and isinstance(choices[0], dict):
            message = choices[0].get("message")
            if isinstance(message, dict):
                return _content_text(message.get("content"))
        strings = [v for v in value.values() if isinstance(v, str)]
        if len(strings) == 1:
            return strings[0]
    return value if isinstance(value, str) else raw


def _event_documents(events: Sequence[Mapping[str, Any]]) -> list[str]:
    """The texts of ``db.query.result`` events' ``db.query.result.document``, in order."""
    texts = [_text(event["attributes"].get("db.query.result.document")) for event in events
             if event.get("name") == "db.query.result"]
    return [text for text in texts if text]


def _document_text(document: Any) -> str | None:
    """A retrieved document: a string, or a mapping's ``page_content``, ``content`` or
    ``text`` (LangChain, LlamaIndex and plain dict documents)."""
    if isinstance(document, dict):
        document = (document.get("page_content") or document.get("content")
                    or document.get("text"))
    return _text(document)


def _entity_text(raw: Any) -> str | None:
    """``traceloop.entity.input``/``output``: JSON of the decorated function's arguments
    (``{"args": [...], "kwargs": {...}}``) or result; its one string, else the text."""
    value = _json(raw)
    if isinstance(value, dict):
        strings = [v for v in [*_as_list(value.get("args")),
                               *(value.get("kwargs") or {}).values()] if isinstance(v, str)]
        strings = strings or [v for v in value.values() if isinstance(v, str)]
        if len(strings) == 1:
            return strings[0]
    return value if isinstance(value, str) else _text(raw)


def _last(values: Any) -> str | None:
    found = None
    for value in values:
        found = value or found
    return found


def _timestamp(end_ns: int) -> str | None:
    try:
        moment = datetime.fromtimestamp(end_ns / 1e9, tz=UTC)
    except (OverflowError, OSError, ValueError):  # past year 9999: no time to record
        return None
    return moment.isoformat().replace("+00:00", "Z") if end_ns > 0 else None
