"""The follow-up message that asks a judge to answer again. Pure.

A schema, truncation or empty-output failure gets one re-ask (see the design
document). The message says what was wrong, quoting the parse failure, and
restates the exact format expected. It is built from the failure and the
metric only, never from the sample: the judge still has the sample in the
conversation, and repeating sample text would give it a second chance to act
as instructions.
"""

from __future__ import annotations

from evalfleet.core.metric import FieldSpec, Metric, OutputSpec
from workers.verdicts.result import ParseFailure

_OPENINGS = {
    "empty": "Your previous reply contained no verdict.",
    "truncated": "Your previous reply was cut off before the verdict was complete.",
    "no_verdict": "Your previous reply did not contain a verdict in the required format.",
    "schema": "Your previous reply did not match the required verdict format.",
    "ambiguous": "Your previous reply contained more than one verdict.",
}


def reask_prompt(failure: ParseFailure, *, metric: Metric) -> str:
    """The user message that asks the judge to answer again.

    Args:
        failure: Why the previous reply was rejected.
        metric: The metric being judged.

    Returns:
        The message: the problem (quoting ``failure.message``), then the exact
        format the verdict must take.
    """
    lines = [_OPENINGS[failure.error_class], f"Problem: {failure.message}.", ""]
    if failure.error_class == "truncated":
        lines[-1:] = ["Keep your explanation short so that the verdict fits.", ""]
    output = metric.spec.output
    lines.extend(_tag_format(output) if output.format == "score_tag" else _json_format(output))
    return "\n".join(lines)


def _json_format(output: OutputSpec) -> list[str]:
    lines = [
        "Reply with exactly one JSON object and nothing else: no code fence, no text before "
        "or after it. It has these keys:",
    ]
    lines.extend(f'- "{name}": {_describe(spec)}' for name, spec in output.fields.items())
    if output.failure is not None:
        reasons = " or ".join(f'"{name}"' for name in output.failure.reason_fields)
        lines.append(
            f'If the inputs cannot be evaluated, set "{output.failure.field}" to '
            f'"{output.failure.equals}", explain why in {reasons or "the reason"}, '
            "and give null for the scores.",
        )
    return lines


def _tag_format(output: OutputSpec) -> list[str]:
    (spec,) = output.fields.values()
    label = f"{output.label} " if output.label else ""
    return [
        "Give your explanation first, then end your reply with the score, once, in exactly "
        "this format:",
        f"{label}<{output.tag}>N</{output.tag}>",
        f"where N is {_describe(spec)}.",
    ]


def _describe(spec: FieldSpec) -> str:
    text = {
        "number": f"a number from {spec.minimum} to {spec.maximum}",
        "integer": f"a whole number from {_whole(spec.minimum)} to {_whole(spec.maximum)}",
        "boolean": "true or false",
        "string": "a string",
        "enum": "one of " + ", ".join(f'"{value}"' for value in spec.values),
        "id": "the id from the request, unchanged",
    }[spec.type]
    if spec.nullable == "when_reference_missing":
        return f"{text}, or null exactly when there is no reference answer"
    if spec.nullable == "allowed":
        return f"{text}, or null"
    return text if spec.required else f"{text} (optional)"


def _whole(value: float | None) -> str:
    return str(int(value)) if value is not None else "?"
