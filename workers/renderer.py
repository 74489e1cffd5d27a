"""Turn a metric and a sample into the chat messages sent to the judge. Pure.

Sample text is data: values are inserted in a single pass and never rendered
again, so ``{x}``, ``{{ x }}``, ``<score>`` or a JSON verdict inside a sample
reaches the judge verbatim. Jinja templates run in a sandbox with undefined
variables as errors, and with bounded output: ``{{ 'a' * 10**9 }}`` is refused
before the string is built, and a message past :data:`MAX_MESSAGE_CHARS` stops
rendering. Either refusal makes that one job a dead letter (``invalid_sample``).
"""

from __future__ import annotations

import string
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypedDict

from jinja2 import StrictUndefined, Template, meta
from jinja2.exceptions import SecurityError
from jinja2.sandbox import SandboxedEnvironment

from evalfleet.core.errors import InvalidMetricSpec, InvalidSample
from evalfleet.core.metric import MessageSpec, Metric
from evalfleet.core.sample import Sample
from workers.compactor import Compaction, render_session, render_tools, render_trajectory

#: Characters counted per token of a metric's budget: the project's estimate is four, and
#: JSON (arguments, results, schemas) tokenises denser than prose, so a third of margin.
BUDGET_CHARS_PER_TOKEN = 3

#: Longest message a Jinja template may render, in characters.
MAX_MESSAGE_CHARS = 8 * 1024 * 1024

#: Largest result of ``**`` in a Jinja template, in bits.
_MAX_POWER_BITS = 4096


class _TooLarge(SecurityError):
    """A template building a value or message over the bounds (not any other sandbox
    refusal, which stays an unexpected error of the template)."""


class _BoundedSandbox(SandboxedEnvironment):
    """The sandbox, with ``*`` and ``**`` checked before they build a huge value."""

    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for sequence, count in ((left, right), (right, left)):
                if (isinstance(sequence, str | list | tuple) and isinstance(count, int)
                        and len(sequence) * count > MAX_MESSAGE_CHARS):
                    raise _TooLarge(f"a repetition of {len(sequence) * count:,} items "
                                        f"is over the limit of {MAX_MESSAGE_CHARS:,}")
        if (operator == "**" and isinstance(left, int) and isinstance(right, int)
                and right > 0 and abs(left) > 1
                and left.bit_length() * right > _MAX_POWER_BITS):
            raise _TooLarge(f"a power over {_MAX_POWER_BITS} bits")
        return super().call_binop(context, operator, left, right)


_JINJA = _BoundedSandbox(
    undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True,
)


class ChatMessage(TypedDict):
    """One message of a chat completion request."""

    role: str
    content: str


@dataclass(frozen=True, slots=True)
class Rendered:
    """The judge messages of one sample, and what compaction cut from its trajectory."""

    messages: list[ChatMessage]
    """The messages, in the metric's order."""
    compaction: Compaction | None = None
    """What was cut from the trajectory to fit the metric's budget; None when nothing."""


def render_messages(metric: Metric, sample: Sample) -> list[ChatMessage]:
    """The judge messages for ``sample`` under ``metric`` (see :func:`render`)."""
    return render(metric, sample).messages


def render(metric: Metric, sample: Sample) -> Rendered:
    """The judge messages for ``sample`` under ``metric``, its trajectory or session (when
    a variable reads it) written by :mod:`workers.compactor` within the metric's token
    budget.

    Args:
        metric: The loaded metric.
        sample: The sample to judge.

    Returns:
        The messages and what was cut.

    Raises:
        TrajectoryTooLong: When the trajectory (or session: ``SessionTooLong``) cannot be
            compacted into the budget.
        InvalidSample: When the sample lacks a value the metric requires.
    """
    turns = [name for name, v in metric.spec.variables.items() if v.source == "session"]
    if turns and sample.session is not None:
        session = sample.session
        return _compacted(metric, sample, turns, {}, lambda budget: render_session(
            session, budget_chars=budget))
    steps = [name for name, v in metric.spec.variables.items() if v.source == "trajectory"]
    if not steps or sample.trajectory is None:
        return Rendered(_messages(metric, metric.resolve_variables(sample)))
    trajectory = sample.trajectory
    given = {name: render_tools(trajectory.tools) for name, v in metric.spec.variables.items()
             if v.source == "trajectory.tools"}
    return _compacted(metric, sample, steps, given, lambda budget: render_trajectory(
        trajectory, budget_chars=budget))


def _compacted(metric: Metric, sample: Sample, names: list[str], given: dict[str, str],
               write: Callable[[int], tuple[str, Compaction | None]]) -> Rendered:
    """The messages with the variables ``names`` filled by ``write`` within the budget
    the rest of the prompt leaves."""
    others = _messages(metric, metric.resolve_variables(sample, given={
        **given, **dict.fromkeys(names, "")}))
    budget_chars = (metric.spec.judge.budget_tokens * BUDGET_CHARS_PER_TOKEN
                    - sum(len(m["content"]) for m in others))
    text, compaction = write(max(0, budget_chars))
    values = metric.resolve_variables(sample, given={**given, **dict.fromkeys(names, text)})
    return Rendered(_messages(metric, values), compaction)


def _messages(metric: Metric, values: dict[str, str]) -> list[ChatMessage]:
    return [ChatMessage(role=message.role, content=_render_one(message, values))
            for message in metric.spec.messages]


def check_templates(metric: Metric) -> None:
    """Check every placeholder in ``metric``'s templates has a variable.

    Raises:
        InvalidMetricSpec: Naming the first unknown placeholder.
    """
    known = {*metric.spec.constants, *metric.spec.variables, *metric.spec.examples}
    for index, message in enumerate(metric.spec.messages):
        unknown = template_placeholders(message) - known
        if unknown:
            raise InvalidMetricSpec(
                f"messages[{index}] uses undefined variable(s) {sorted(unknown)}", path=metric.path,
            )


def template_placeholders(message: MessageSpec) -> set[str]:
    """The variable names a message template refers to."""
    if message.syntax == "jinja":
        return set(meta.find_undeclared_variables(_JINJA.parse(message.template)))
    if message.syntax == "format":
        # Full field names, so "{x.attr}" or "{x[0]}" shows up as unknown.
        return {name for _, name, _, _ in string.Formatter().parse(message.template) if name}
    return set()


def _render_one(message: MessageSpec, values: dict[str, str]) -> str:
    if message.syntax == "jinja":
        return _render_bounded(_compiled(message.template), values)
    if message.syntax == "format":
        return message.template.format_map(values)
    return message.template


def _render_bounded(template: Template, values: dict[str, str]) -> str:
    parts: list[str] = []
    size = 0
    try:
        for part in template.generate(values):
            size += len(part)
            if size > MAX_MESSAGE_CHARS:
                raise InvalidSample(f"the prompt is not rendered: its template makes a "
                                    f"message over {MAX_MESSAGE_CHARS:,} characters")
            parts.append(part)
    except _TooLarge as exc:
        raise InvalidSample(f"the prompt is not rendered: {exc}") from None
    return "".join(parts)


@lru_cache(maxsize=256)
def _compiled(source: str) -> Template:
    return _JINJA.from_string(source)
