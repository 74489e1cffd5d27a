"""An LLM application as teams write them, for the end-to-end trace tests: the
OpenTelemetry SDK with the OTLP/HTTP exporter configured by ``OTEL_*`` environment
variables only, the openai client instrumented by a real instrumentation package, and a
retriever span written with the SDK in that convention's attributes (none of the openai
instrumentations traces retrieval).

    python -m tests.producers.traces.otel_app CONVENTION QUESTION [--split]

CONVENTION is ``openinference``, ``genai`` (``opentelemetry-instrumentation-openai-v2``)
or ``openllmetry`` (Traceloop's ``opentelemetry-instrumentation-openai``).
With ``--split`` the retriever span is exported on its own, then the app prints
``exported`` and waits for a line on standard input before the model call. It prints
``{"trace_id", "answer"}`` as its last line.
"""

from __future__ import annotations

import json
import sys

from openai import OpenAI
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

DOCUMENTS = ["Subscriptions can be paused for up to three months.",
             "Billing stops while a subscription is paused."]


def instrument(convention: str) -> None:
    if convention == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor
        OpenAIInstrumentor().instrument()
    elif convention == "genai":
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor as V2
        V2().instrument()
    else:
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor as Traceloop
        Traceloop().instrument()


def retrieval_attributes(convention: str) -> dict[str, str | float]:
    if convention == "openinference":
        attributes: dict[str, str | float] = {"openinference.span.kind": "RETRIEVER"}
        for n, text in enumerate(DOCUMENTS):
            attributes[f"retrieval.documents.{n}.document.id"] = f"doc-{n}"
            attributes[f"retrieval.documents.{n}.document.content"] = text
            attributes[f"retrieval.documents.{n}.document.score"] = 0.9 - n / 10
        return attributes
    if convention == "openllmetry":  # as traceloop-sdk's @task records a retriever
        return {"traceloop.span.kind": "task", "traceloop.entity.name": "retrieve",
                "traceloop.entity.input": json.dumps({"args": ["pause"], "kwargs": {}}),
                "traceloop.entity.output": json.dumps(DOCUMENTS)}
    return {"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.query.text": "pause",
            "gen_ai.retrieval.documents": json.dumps(
                [{"id": f"doc-{n}", "score": 0.9 - n / 10, "content": text}
                 for n, text in enumerate(DOCUMENTS)])}


def main() -> None:
    convention, question = sys.argv[1], sys.argv[2]
    provider = TracerProvider(resource=Resource.create())  # OTEL_SERVICE_NAME
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # OTEL_EXPORTER_*
    trace.set_tracer_provider(provider)
    instrument(convention)
    tracer = trace.get_tracer("support-bot")
    client = OpenAI()  # OPENAI_BASE_URL, OPENAI_API_KEY
    with tracer.start_as_current_span("POST /chat", kind=trace.SpanKind.SERVER) as root:
        root.set_attribute("http.route", "/chat")
        root.set_attribute("app.tenant", "acme")
        with tracer.start_as_current_span("retrieve.task") as retriever:
            for key, value in retrieval_attributes(convention).items():
                retriever.set_attribute(key, value)
        if "--split" in sys.argv:
            provider.force_flush()
            print("exported", flush=True)
            sys.stdin.readline()
        reply = client.chat.completions.create(model="app-model", messages=[
            {"role": "system", "content": "Answer from the documents: " + " ".join(DOCUMENTS)},
            {"role": "user", "content": question}])
        trace_id = f"{root.get_span_context().trace_id:032x}"
    provider.shutdown()
    print(json.dumps({"trace_id": trace_id, "answer": reply.choices[0].message.content}),
          flush=True)


if __name__ == "__main__":
    main()
