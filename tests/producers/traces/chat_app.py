"""A conversational agent as teams write them, for the session tests: pydantic-ai with one
tool, its model an OpenAI-compatible server (``OPENAI_BASE_URL``), each turn run with the
conversation so far (``message_history``, which carries pydantic-ai's conversation id
from turn to turn), its traces exported by the OTLP/HTTP exporter configured by
``OTEL_*`` variables, after ``Agent.instrument_all()``.

    python -m tests.producers.traces.chat_app

Reads one command a line on standard input: ``say QUESTION`` runs a turn and prints
``{"trace_id", "conversation_id", "answer"}`` once its spans are exported; ``end`` sends
the app's end-of-conversation span (``conversation.end``, carrying the conversation id)
and prints ``{"ended": conversation id}``; an empty line quits.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

SYSTEM = "You are a travel assistant. Use the tools to answer."


def get_weather(city: str) -> str:
    """Current weather of a city."""
    return f"4 C and rain in {city}"


def main() -> None:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = TracerProvider(resource=Resource.create())  # OTEL_SERVICE_NAME
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # OTEL_EXPORTER_*
    seen = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(seen))
    trace.set_tracer_provider(provider)
    Agent.instrument_all()
    model = OpenAIChatModel("agent-model", provider=OpenAIProvider(
        base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"]))
    agent = Agent(model, system_prompt=SYSTEM, name="travel_agent", tools=[get_weather])
    history: list[Any] = []
    conversation = None
    for line in sys.stdin:
        command, _, text = line.strip().partition(" ")
        if command == "say":
            seen.clear()
            result = agent.run_sync(text, message_history=history)
            history = result.all_messages()
            provider.force_flush()
            root = next(s for s in seen.get_finished_spans() if s.parent is None)
            conversation = root.attributes and root.attributes.get("gen_ai.conversation.id")
            print(json.dumps({"trace_id": f"{root.context.trace_id:032x}",
                              "conversation_id": conversation, "answer": str(result.output)}),
                  flush=True)
        elif command == "end":
            with trace.get_tracer("chat-app").start_as_current_span(
                    "conversation.end", attributes={"gen_ai.conversation.id": str(conversation)}):
                pass
            provider.force_flush()
            print(json.dumps({"ended": conversation}), flush=True)
        else:
            break
    provider.shutdown()


if __name__ == "__main__":
    main()
