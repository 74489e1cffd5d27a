"""An agent's trajectory as the pages show it: one line per step, its details on demand.

The review page and the verdict page show a trace-unit sample's steps as ``<details>``
elements (keyboard: Tab or ``t`` to a step, Enter opens it), each summed up on one line
(:func:`evalfleet.core.trajectory.step_summary`) and opened to its parts: messages, tool
calls with their arguments as indented JSON, results, errors, documents. Pure: the
template escapes every text (sample text is hostile); here it is only bounded, so a run
of thousands of steps or a megabyte result stays a page a browser opens at once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from evalfleet.alerts.evidence import plain_text
from evalfleet.core.trajectory import (
    HandoffStep,
    Message,
    ModelStep,
    RetrievalStep,
    ToolStep,
    Trajectory,
    step_summary,
)

#: Steps shown on a page; the rest are counted.
MAX_STEPS = 300

#: Longest part (a message, arguments, a result) shown, in characters.
PART_CHARS = 20_000

#: Longest one-line summary of a step, in characters.
SUMMARY_CHARS = 160


@dataclass(frozen=True)
class Part:
    """One part of a step, opened."""

    label: str
    """What it is (``arguments``, ``result``, ``in: user``)."""
    text: str
    """Its text: JSON indented, prose as written (cut to :data:`PART_CHARS`)."""


@dataclass(frozen=True)
class StepView:
    """One step: its number, kind, one-line summary and parts."""

    number: int
    """From 1, as the judge's prompt numbers steps (``failed_step`` refers to it)."""
    kind: str
    """``model``, ``tool``, ``retrieval`` or ``handoff``."""
    summary: str
    parts: list[Part]
    failed: bool = False
    """The step the judge named as where things went wrong."""


@dataclass(frozen=True)
class TrajectoryView:
    """A trajectory for a page."""

    steps: list[StepView] = field(default_factory=list)
    more_steps: int = 0
    """Steps past :data:`MAX_STEPS`, not shown."""
    tools: list[Part] = field(default_factory=list)
    """The tools offered: name and description, and the schema as indented JSON."""
    final_answer: str | None = None
    problem: str | None = None
    """Why the stored trajectory could not be read (the page shows the rest)."""


def trajectory_view(data: Any, *, failed_step: int | None = None) -> TrajectoryView | None:
    """The view of a sample's stored ``trajectory`` (None: the sample has none).

    Args:
        data: The trajectory's JSON form as kept with the verdict.
        failed_step: The step the judge named, marked on the page.
    """
    if data is None:
        return None
    try:
        trajectory = Trajectory.model_validate(data)
    except (ValidationError, RecursionError) as exc:
        return TrajectoryView(problem=unreadable("trajectory", exc))
    steps = [StepView(number=n, kind=step.type,
                      summary=plain_text(step_summary(step), limit=SUMMARY_CHARS),
                      parts=_parts(step), failed=n == failed_step)
             for n, step in enumerate(trajectory.steps[:MAX_STEPS], 1)]
    tools = [Part(label=cut(f"{tool.name}: {tool.description}" if tool.description
                             else tool.name), text=_pretty(tool.parameters))
             for tool in trajectory.tools]
    return TrajectoryView(steps=steps, more_steps=max(0, len(trajectory.steps) - MAX_STEPS),
                          tools=tools, final_answer=cut(trajectory.final_answer)
                          if trajectory.final_answer is not None else None)


def unreadable(what: str, error: ValidationError | RecursionError) -> str:
    """Why a ``what`` kept with a sample does not read: its first error, where it is."""
    first = error.errors()[0] if isinstance(error, ValidationError) else None
    where = ".".join(str(p) for p in first["loc"]) if first else what
    return (f"the {what} kept with this sample does not read "
            f"({where}: {first['msg'] if first else 'too deep'})")


def _parts(step: ModelStep | ToolStep | RetrievalStep | HandoffStep) -> list[Part]:
    if isinstance(step, ToolStep):
        parts = [Part("arguments", _pretty(step.arguments)), Part("result", _pretty(step.result))]
        if step.error:
            parts.append(Part("error", cut(step.error)))
        return [*parts, *_took(step.duration_ms), *_named("call id", step.call_id)]
    if isinstance(step, ModelStep):
        messages = [part for message in step.input for part in _message("in", message)]
        messages += [part for message in step.output for part in _message("out", message)]
        return [*_named("model", step.model), *messages, *_took(step.duration_ms)]
    if isinstance(step, RetrievalStep):
        documents = [Part(f"document {d}", cut(text))
                     for d, text in enumerate(step.documents, 1)]
        return [*_named("query", step.query), *documents]
    return [Part("agent", cut(step.agent))]


def _message(side: str, message: Message) -> list[Part]:
    answers = f" (answering call {message.tool_call_id})" if message.tool_call_id else ""
    parts = [Part(f"{side}: {message.role}{answers}", cut(message.content))] \
        if message.content or not message.tool_calls else []
    parts += [Part(f"{side}: {message.role} asks for {call.name}"
                   + (f" (call {call.id})" if call.id else ""), _pretty(call.arguments))
              for call in message.tool_calls]
    return parts


def _named(label: str, value: str | None) -> list[Part]:
    return [Part(label, cut(value))] if value else []


def _took(duration_ms: float | None) -> list[Part]:
    return [Part("took", f"{duration_ms:,.1f} ms")] if duration_ms is not None else []


def _pretty(value: Any) -> str:
    """A JSON value indented for reading; text as it is."""
    if isinstance(value, str):
        return cut(value)
    return cut(json.dumps(value, ensure_ascii=False, indent=2))


def cut(text: str) -> str:
    """``text`` cut to :data:`PART_CHARS`, saying how much was left out."""
    if len(text) <= PART_CHARS:
        return text
    return (f"{text[:PART_CHARS]}\n[... {len(text) - PART_CHARS:,} more characters not "
            "shown ...]")
