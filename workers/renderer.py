"""Turn a metric and a sample into the chat messages sent to the judge. Pure.

Sample text is data: values are inserted in a single pass and never rendered
again, so ``{x}``, ``{{ x }}``, ``<score>`` or a JSON verdict inside a sample
reaches the judge verbatim. Jinja templates run in a sandbox with undefined
variables as errors.
"""

from __future__ import annotations

import string
from functools import lru_cache
from typing import TypedDict

from jinja2 import StrictUndefined, Template, meta
from jinja2.sandbox import SandboxedEnvironment

from evalfleet.errors import InvalidMetricSpec
from evalfleet.metric import MessageSpec, Metric
from evalfleet.sample import Sample

_JINJA = SandboxedEnvironment(
    undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True,
)


class ChatMessage(TypedDict):
    """One message of a chat completion request."""

    role: str
    content: str


def render_messages(metric: Metric, sample: Sample) -> list[ChatMessage]:
    """The judge messages for ``sample`` under ``metric``.

    Args:
        metric: The loaded metric.
        sample: The sample to judge.

    Returns:
        The messages, in the metric's order.

    Raises:
        InvalidSample: When the sample lacks a value the metric requires.
    """
    values = metric.resolve_variables(sample)
    return [
        ChatMessage(role=message.role, content=_render_one(message, values))
        for message in metric.spec.messages
    ]


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
        return _compiled(message.template).render(values)
    if message.syntax == "format":
        return message.template.format_map(values)
    return message.template


@lru_cache(maxsize=256)
def _compiled(source: str) -> Template:
    return _JINJA.from_string(source)
