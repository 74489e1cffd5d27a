"""The ``traces`` section of the sampling config: how spans become samples. Pure.

::

    traces:
      judge: {kind: [LLM]}            # judge each matching span: ids <trace id>:<span id>
      segments: {tenant: app.tenant}  # segment name: span or resource attribute
      fields: {evaluation_goal: app.evaluation_goal}
      reference: app.expected_answer
      sessions:                       # conversations judged whole (unit: session metrics)
        attribute: app.chat_id        # read before session.id, gen_ai.conversation.id...
        end: {span_name: [conversation.end], attribute: app.conversation_ended}

Without ``judge``, each trace is one sample whose id is the trace id.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SpanSelector(_Model):
    """Which spans of a trace are judged, each as a sample of its own; every key given
    must hold (a list: any of its values)."""

    name: tuple[str, ...] | None = None
    """Span names."""

    kind: tuple[str, ...] | None = None
    """OpenInference span kinds (``LLM``, ``CHAIN``...), ``gen_ai.operation.name`` values
    (``chat``) or OTLP span kinds (``client``, ``server``, ``internal``...)."""

    service: tuple[str, ...] | None = None
    """The resource's ``service.name``."""

    attributes: dict[str, str] = Field(default_factory=dict)
    """Span attributes and the value each must have."""


class SessionEnd(_Model):
    """What marks the end of a conversation: a span of the trace with one of these names,
    or with this attribute set to true (or ``"true"``)."""

    span_name: tuple[str, ...] = ()
    """Span names that end the session."""

    attribute: str | None = None
    """A span attribute that ends the session when true."""


class SessionSpec(_Model):
    """How traces are grouped into sessions."""

    attribute: str | None = None
    """A span or resource attribute naming the session, read before the conventions'
    ``session.id``, ``gen_ai.conversation.id`` and
    ``traceloop.association.properties.session_id``."""

    end: SessionEnd = Field(default_factory=SessionEnd)
    """What closes a session at once (without waiting for it to go quiet)."""


class TraceSpec(_Model):
    """How a trace's spans become samples."""

    judge: SpanSelector | None = None
    """Judge every span this selects (with input and output), id ``<trace id>:<span id>``;
    None: one sample per trace, id the trace id (the root span when it carries input and
    output, else the trace's last LLM span)."""

    segments: dict[str, str] = Field(default_factory=dict)
    """More segments: segment name to the span or resource attribute giving its value
    (user and session ids only when named here)."""

    fields: dict[str, str] = Field(default_factory=dict)
    """Metric inputs: sample field name to the span or resource attribute giving it."""

    reference: str | None = None
    """The attribute holding the expected answer; None leaves ``reference`` null."""

    sessions: SessionSpec = Field(default_factory=SessionSpec)
    """How traces are grouped into conversations for the metrics of unit ``session``."""
