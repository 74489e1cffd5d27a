"""The constrained-output request for a metric: OpenAI ``response_format``. Pure.

Judges that support structured outputs are given a strict JSON schema built
from the metric's output spec, so most replies need no repair at all. Strict
mode wants every key listed as required and no extra keys; a key the metric
lets the judge omit, or set to null, is typed ``[T, "null"]`` instead.
"""

from __future__ import annotations

from typing import Any, Literal

from evalfleet.core.metric import FieldSpec, Metric

ResponseFormat = Literal["json_schema", "json_object_schema", "json_object", "text"]

#: Constrained-output modes from weakest to strongest. ``json_object_schema`` is JSON mode
#: with the schema beside the type (``{"type": "json_object", "schema": ...}``), which
#: llama-cpp-python enforces by grammar while it refuses ``json_schema``.
MODES: tuple[ResponseFormat, ...] = ("text", "json_object", "json_object_schema", "json_schema")

_JSON_TYPES = {
    "number": "number", "integer": "integer", "boolean": "boolean", "string": "string",
    "enum": "string", "id": "string",
}


def response_format_for(metric: Metric, *, supported: ResponseFormat) -> dict[str, Any] | None:
    """The ``response_format`` argument for a judge call under ``metric``.

    The metric's wish is lowered to what the judge supports: a judge without
    JSON-schema support gets JSON mode, one without either gets plain text.

    Args:
        metric: The metric being judged.
        supported: The strongest mode the judge endpoint supports.

    Returns:
        The argument to send, or None to send none (plain text, and always for
        score-tag metrics, whose verdict is not JSON).
    """
    if metric.spec.output.format != "json":
        return None
    wanted = metric.spec.judge.response_format
    mode = min(wanted, supported, key=MODES.index)
    if mode == "text":
        return None
    if mode == "json_object":
        return {"type": "json_object"}
    if mode == "json_object_schema":
        return {"type": "json_object", "schema": verdict_schema(metric)}
    return {
        "type": "json_schema",
        "json_schema": {"name": metric.name, "strict": True, "schema": verdict_schema(metric)},
    }


def verdict_schema(metric: Metric) -> dict[str, Any]:
    """The JSON schema of ``metric``'s verdict object.

    Args:
        metric: A metric with a JSON output.

    Returns:
        An object schema: every field required, no additional properties,
        nullable fields typed ``[T, "null"]``, enums and numeric bounds included.
    """
    output = metric.spec.output
    score_fields = {score.source for score in metric.spec.scores.values()}
    properties = {
        name: _field_schema(
            spec,
            # A judge-declared failure sends its scores as null.
            nullable=spec.nullable != "never" or not spec.required
            or (output.failure is not None and name in score_fields),
        )
        for name, spec in output.fields.items()
    }
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def _field_schema(spec: FieldSpec, *, nullable: bool) -> dict[str, Any]:
    json_type = _JSON_TYPES[spec.type]
    schema: dict[str, Any] = {"type": [json_type, "null"] if nullable else json_type}
    if spec.type == "enum":
        schema["enum"] = [*spec.values, None] if nullable else list(spec.values)
    if spec.type in ("number", "integer"):
        assert spec.minimum is not None and spec.maximum is not None  # checked by FieldSpec
        schema["minimum"] = _bound(spec.minimum, spec)
        schema["maximum"] = _bound(spec.maximum, spec)
    return schema


def _bound(value: float, spec: FieldSpec) -> float | int:
    return int(value) if spec.type == "integer" or value.is_integer() else value
