"""An agent as teams write them, for the agent trace tests: a real agent framework with two
tools, its model an OpenAI-compatible chat completions server (``OPENAI_BASE_URL``), its
traces exported by the OpenTelemetry SDK's OTLP/HTTP exporter configured by ``OTEL_*``
variables only, plus the framework's documented instrumentation call.

    python -m tests.producers.traces.agent_app FRAMEWORK QUESTION [--hold] [--dump FILE]

FRAMEWORK is ``pydantic_ai`` (``Agent.instrument_all()``, which emits the OTel GenAI
conventions) or ``openai_agents`` (the OpenAI Agents SDK on chat completions, with
``OpenAIAgentsInstrumentor().instrument()``). With ``--hold`` the first tool flushes the
spans ended so far, prints ``holding`` and waits for a line on standard input (the run
then lasts as long as the test wants). ``--dump FILE`` writes every span's name and
attributes as the framework set them. The last line printed is ``{"trace_id", "answer"}``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

SYSTEM = "You are a travel assistant. Use the tools to answer."

#: The provider, once set up (the first tool flushes it with --hold).
_PROVIDER: list[TracerProvider] = []


def get_weather(city: str) -> str:
    """Current weather of a city."""
    _hold()
    return f"4 C and rain in {city}"


def get_local_time(city: str) -> str:
    """Local time in a city."""
    return f"09:30 in {city}"


def _hold() -> None:
    if "--hold" in sys.argv:
        _PROVIDER[0].force_flush()
        print("holding", flush=True)
        sys.stdin.readline()


def run_pydantic_ai(question: str) -> str:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    Agent.instrument_all()
    model = OpenAIChatModel("agent-model", provider=OpenAIProvider(
        base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"]))
    agent = Agent(model, system_prompt=SYSTEM, name="travel_agent",
                  tools=[get_weather, get_local_time])
    return str(agent.run_sync(question).output)


def run_openai_agents(question: str) -> str:
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_default_openai_api,
    )
    from openai import AsyncOpenAI
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    OpenAIAgentsInstrumentor().instrument()  # replaces the SDK's own upload of its traces
    set_default_openai_api("chat_completions")
    model = OpenAIChatCompletionsModel(model="agent-model", openai_client=AsyncOpenAI())
    agent = Agent(name="travel_agent", instructions=SYSTEM, model=model,
                  tools=[function_tool(get_weather), function_tool(get_local_time)])
    return str(Runner.run_sync(agent, question).final_output)


def _dump(spans: tuple[ReadableSpan, ...], path: str) -> None:
    rows = [{"name": span.name, "trace_id": f"{span.context.trace_id:032x}",
             "parent": f"{span.parent.span_id:016x}" if span.parent else None,
             "attributes": dict(span.attributes or {})} for span in spans]
    with open(path, "w") as out:
        json.dump(rows, out, indent=1, default=str)


def main() -> None:
    framework, question = sys.argv[1], sys.argv[2]
    provider = TracerProvider(resource=Resource.create())  # OTEL_SERVICE_NAME
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # OTEL_EXPORTER_*
    seen = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(seen))
    trace.set_tracer_provider(provider)
    _PROVIDER.append(provider)
    runs: dict[str, Any] = {"pydantic_ai": run_pydantic_ai, "openai_agents": run_openai_agents}
    answer = runs[framework](question)
    provider.shutdown()
    spans = seen.get_finished_spans()
    if "--dump" in sys.argv:
        _dump(spans, sys.argv[sys.argv.index("--dump") + 1])
    roots = [span for span in spans if span.parent is None]
    print(json.dumps({"trace_id": f"{roots[-1].context.trace_id:032x}", "answer": answer}),
          flush=True)


if __name__ == "__main__":
    main()
