"""From spans to samples: each convention, the judged span, ids, segments, fields."""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry.trace import SpanKind

from producers.traces import SpanLimits, decode_protobuf
from producers.traces.config import SpanSelector, TraceSpec
from producers.traces.mapping import map_trace, read_span
from producers.traces.span import Span
from tests.producers.traces.builders import sdk_request

TRACE = "5b8efff798038103d269b633813fc60c"
RESOURCE = {"service.name": "support-bot", "deployment.environment": "prod"}


def span(span_id: str, attributes: dict[str, Any], *, parent: str = "aaaaaaaaaaaaaaa0",
         name: str = "s", start: int = 1, end: int = 2, kind: int = 1) -> Span:
    return Span(TRACE, span_id, parent, name, kind, start * 10**9, end * 10**9, attributes,
                RESOURCE)


def root(attributes: dict[str, Any] | None = None, **kwargs: Any) -> Span:
    return span("aaaaaaaaaaaaaaa0", attributes or {}, parent="", name="rag", start=0, end=9,
                **kwargs)


OPENAI_REQUEST = json.dumps({"model": "gpt-x", "messages": [
    {"role": "system", "content": "Answer from the context."},
    {"role": "user", "content": "Can I pause?"}]})
OPENAI_RESPONSE = json.dumps({"choices": [{"message": {"role": "assistant",
                                                       "content": "Yes, for 3 months."}}]})

OPENINFERENCE_LLM = {
    "openinference.span.kind": "LLM", "input.value": OPENAI_REQUEST,
    "input.mime_type": "application/json", "output.value": OPENAI_RESPONSE,
    "output.mime_type": "application/json", "llm.model_name": "gpt-x-0613",
    "llm.input_messages.0.message.role": "system",
    "llm.input_messages.0.message.content": "Answer from the context.",
    "llm.input_messages.1.message.role": "user",
    "llm.input_messages.1.message.content": "Can I pause?",
    "llm.output_messages.0.message.role": "assistant",
    "llm.output_messages.0.message.content": "Yes, for 3 months.",
    "llm.prompt_template.version": "v12",
}
OPENINFERENCE_RETRIEVER = {
    "openinference.span.kind": "RETRIEVER", "input.value": "pause",
    "retrieval.documents.0.document.id": "d1",
    "retrieval.documents.0.document.content": "Pauses last up to 3 months.",
    "retrieval.documents.1.document.content": "Billing stops while paused.",
    "retrieval.documents.10.document.content": "Tenth.",
    "retrieval.documents.2.document.content": "Third.",
}
GENAI_CHAT = {
    "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-x",
    "gen_ai.response.model": "gpt-x-0613",
    "gen_ai.input.messages": json.dumps([
        {"role": "system", "parts": [{"type": "text", "content": "sys"}]},
        {"role": "user", "parts": [{"type": "text", "content": "Can I pause?"}]}]),
    "gen_ai.output.messages": json.dumps([{"role": "assistant", "finish_reason": "stop",
                                           "parts": [{"type": "text",
                                                      "content": "Yes, for 3 months."}]}]),
}
GENAI_RETRIEVAL = {
    "gen_ai.operation.name": "retrieval", "gen_ai.retrieval.query.text": "pause",
    "gen_ai.retrieval.documents": json.dumps([
        {"id": "d1", "score": 0.9, "content": "Pauses last up to 3 months."},
        {"id": "d2", "score": 0.5}]),
}
OPENLLMETRY_CHAT = {
    "llm.request.type": "chat", "gen_ai.request.model": "gpt-x",
    "gen_ai.prompt.0.role": "system", "gen_ai.prompt.0.content": "sys",
    "gen_ai.prompt.1.role": "user", "gen_ai.prompt.1.content": "Can I pause?",
    "gen_ai.completion.0.role": "assistant",
    "gen_ai.completion.0.content": "Yes, for 3 months.", "traceloop.prompt.version": "7",
}


@pytest.mark.parametrize(("attributes", "convention", "question", "answer", "documents",
                          "model"), [
    (OPENINFERENCE_LLM, "openinference", "Can I pause?", "Yes, for 3 months.", None,
     "gpt-x-0613"),
    ({k: v for k, v in OPENINFERENCE_LLM.items() if not k.startswith("llm.")},
     "openinference", "Can I pause?", "Yes, for 3 months.", None, None),
    (OPENINFERENCE_RETRIEVER, "openinference", "pause", None,
     ["Pauses last up to 3 months.", "Billing stops while paused.", "Third.", "Tenth."], None),
    ({"openinference.span.kind": "CHAIN", "input.value": "Can I pause?",
      "output.value": "Yes."}, "openinference", "Can I pause?", "Yes.", None, None),
    ({"openinference.span.kind": "CHAIN", "input.value": '{"question": "Can I pause?"}',
      "input.mime_type": "application/json", "output.value": "Yes."}, "openinference",
     "Can I pause?", "Yes.", None, None),
    (GENAI_CHAT, "genai", "Can I pause?", "Yes, for 3 months.", None, "gpt-x-0613"),
    ({**GENAI_CHAT, "gen_ai.input.messages": json.loads(GENAI_CHAT["gen_ai.input.messages"])},
     "genai", "Can I pause?", "Yes, for 3 months.", None, "gpt-x-0613"),
    (GENAI_RETRIEVAL, "genai", "pause", None, ["Pauses last up to 3 months."], None),
    (OPENLLMETRY_CHAT, "openllmetry", "Can I pause?", "Yes, for 3 months.", None, "gpt-x"),
    ({"traceloop.span.kind": "workflow",
      "traceloop.entity.input": json.dumps({"args": ["Can I pause?"], "kwargs": {}}),
      "traceloop.entity.output": json.dumps("Yes.")}, "openllmetry", "Can I pause?", "Yes.",
     None, None),
    ({"traceloop.span.kind": "task", "traceloop.entity.name": "retrieve_docs",
      "traceloop.entity.input": json.dumps({"args": ["pause"], "kwargs": {}}),
      "traceloop.entity.output": json.dumps(["Pauses last up to 3 months.",
                                             {"page_content": "Billing stops."}])},
     "openllmetry", "pause", None, ["Pauses last up to 3 months.", "Billing stops."], None),
    ({"http.route": "/chat"}, None, None, None, None, None),
    ({"gen_ai.operation.name": "chat", "gen_ai.input.messages": "[" * 300 + "]" * 300},
     "genai", None, None, None, None),
])
def test_read_span(attributes: dict[str, Any], convention: str | None, question: str | None,
                   answer: str | None, documents: list[str] | None, model: str | None) -> None:
    reading = read_span(span("bbbbbbbbbbbbbbb1", attributes))
    assert (reading.convention, reading.question, reading.answer, reading.documents,
            reading.model) == (convention, question, answer, documents, model)


@pytest.mark.parametrize(("llm", "retriever"), [
    (OPENINFERENCE_LLM, OPENINFERENCE_RETRIEVER), (GENAI_CHAT, GENAI_RETRIEVAL),
    (OPENLLMETRY_CHAT, OPENINFERENCE_RETRIEVER),
])
def test_a_rag_trace_is_one_sample_with_the_retrieved_context(
        llm: dict[str, Any], retriever: dict[str, Any]) -> None:
    spans = [span("bbbbbbbbbbbbbbb2", llm, start=3, end=5, kind=3),
             root({"http.route": "/chat"}),
             span("bbbbbbbbbbbbbbb1", retriever, start=1, end=2)]
    (sample,) = map_trace(spans, spec=TraceSpec()).samples
    record = sample.record
    assert sample.sampling_key == TRACE and record["id"] == TRACE
    assert (record["input"], record["output"]) == ("Can I pause?", "Yes, for 3 months.")
    assert record["context"][0] == "Pauses last up to 3 months."
    assert record["timestamp"] == "1970-01-01T00:00:05Z"
    assert record["attributes"]["app"] == "support-bot"
    assert record["attributes"]["route"] == "/chat"
    assert record["fields"] == {"trace_id": TRACE}
    assert record["reference"] is None


def test_the_root_is_judged_when_it_has_question_and_answer() -> None:
    spans = [root({"openinference.span.kind": "CHAIN", "input.value": "Pause?",
                   "output.value": "Yes."}),
             span("bbbbbbbbbbbbbbb2", OPENINFERENCE_LLM, start=3, end=5)]
    record = map_trace(spans, spec=TraceSpec()).samples[0].record
    assert (record["input"], record["output"]) == ("Pause?", "Yes.")
    # The model and prompt version come from the LLM span; the route from the root's name.
    assert record["attributes"] == {"app": "support-bot", "route": "rag",
                                    "model": "gpt-x-0613", "prompt_version": "v12"}


def test_selector_judges_each_span_and_keys_sampling_on_the_trace() -> None:
    spans = [root(), span("bbbbbbbbbbbbbbb2", OPENINFERENCE_LLM, start=3, end=5),
             span("bbbbbbbbbbbbbbb3", {**OPENINFERENCE_LLM, "llm.output_messages.0.message"
                                       ".content": "No."}, start=6, end=7)]
    samples = map_trace(spans, spec=TraceSpec(judge=SpanSelector(kind=("LLM",)))).samples
    assert [s.record["id"] for s in samples] == [f"{TRACE}:bbbbbbbbbbbbbbb2",
                                                 f"{TRACE}:bbbbbbbbbbbbbbb3"]
    assert {s.sampling_key for s in samples} == {TRACE}
    assert samples[1].record["output"] == "No."
    none = map_trace(spans, spec=TraceSpec(judge=SpanSelector(name=("other",))))
    assert (none.samples, none.reason) == ([], "no_selected_span")


def test_configured_segments_fields_and_reference() -> None:
    spec = TraceSpec(segments={"env": "deployment.environment", "user": "user.id",
                               "tier": "metadata.tier"},
                     fields={"evaluation_goal": "app.goal"}, reference="app.expected")
    spans = [root({"user.id": "u-1", "app.goal": "balanced", "app.expected": "Yes.",
                   "metadata": json.dumps({"tier": "gold"})}),
             span("bbbbbbbbbbbbbbb2", GENAI_CHAT, start=3, end=5)]
    record = map_trace(spans, spec=spec).samples[0].record
    assert record["attributes"]["env"] == "prod"
    assert record["attributes"]["user"] == "u-1" and record["attributes"]["tier"] == "gold"
    assert record["fields"] == {"trace_id": TRACE, "evaluation_goal": "balanced"}
    assert record["reference"] == "Yes."


@pytest.mark.parametrize(("spans", "reason"), [
    ([root({"http.route": "/x"})], "no_llm_span"),
    ([root(), span("bbbbbbbbbbbbbbb2", {**GENAI_CHAT, "gen_ai.output.messages": "[]"})],
     "no_question_or_answer"),
])
def test_traces_without_a_judgeable_span_give_no_sample(spans: list[Span], reason: str) -> None:
    mapping = map_trace(spans, spec=TraceSpec())
    assert (mapping.samples, mapping.reason) == ([], reason)


def test_a_vector_store_span_gives_its_query_result_events_as_context() -> None:
    # As OpenLLMetry's chromadb, pinecone and qdrant instrumentations record a query:
    # one db.query.result event per document, recorded here with the real SDK and
    # decoded from its protobuf export.
    def build(tracer: Any) -> None:
        with tracer.start_as_current_span("rag"):
            with tracer.start_as_current_span("chroma.query") as query:
                query.set_attribute("db.system", "chroma")
                query.set_attribute("db.operation", "query")
                query.add_event("db.query.embeddings", {"db.query.embeddings.vector": "[0.1]"})
                for n, text in enumerate(["Pauses last up to 3 months.", "", "Refunds: 5 days."]):
                    query.add_event("db.query.result", {
                        "db.query.result.id": f"doc-{n}", "db.query.result.distance": 0.1 * n,
                        "db.query.result.metadata": '{"source": "faq"}',
                        "db.query.result.document": text})
            with tracer.start_as_current_span("openai.chat", kind=SpanKind.CLIENT) as llm:
                for key, value in OPENLLMETRY_CHAT.items():
                    llm.set_attribute(key, value)

    decoded = decode_protobuf(sdk_request(build), limits=SpanLimits(), max_spans=10)
    query = next(s for s in decoded.spans if s.name == "chroma.query")
    assert [e["name"] for e in query.events] == ["db.query.result"] * 3  # the rest dropped
    assert query.events[0]["attributes"]["db.query.result.id"] == "doc-0"
    assert read_span(query).documents == ["Pauses last up to 3 months.", "Refunds: 5 days."]
    (sample,) = map_trace(decoded.spans, spec=TraceSpec()).samples
    assert sample.record["context"] == ["Pauses last up to 3 months.", "Refunds: 5 days."]
    assert sample.record["input"] == "Can I pause?"
