"""The verdict a fine-tuned judge should answer for a dataset item. Pure.

Built from the item in the metric's own output format, so the worker's parser reads it
as a valid verdict: for a JSON output, one object with each score's field (people's
value where they labelled it, the judge's otherwise), the sample id in an ``id`` field,
the judge's reasoning in the first reason field and the non-failure value of a
failure field; for a score tag, the judge's reasoning and then the tag
(``Score- <score>4</score>``). Annotations the item does not keep (an extracted answer,
an error type) are left out: the parser never rejects a verdict for them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from evalfleet.core.metric import Metric
from evalfleet.store.queries.datasets import DatasetItem


def target_scores(item: DatasetItem, *, metric: Metric,
                  labels: Mapping[str, Any]) -> dict[str, Any] | None:
    """Each score's value on the judge's scale: people's where they labelled it, else the
    judge's (an ``ok`` verdict's only).

    Returns:
        By score name, or None when some score has no value to teach.
    """
    values: dict[str, Any] = {}
    for name in metric.spec.scores:
        if name in labels:
            values[name] = labels[name]
        elif item.status == "ok" and name in item.raw_scores:
            values[name] = item.raw_scores[name]
        else:
            return None
    return values


def verdict_text(item: DatasetItem, *, metric: Metric,
                 labels: Mapping[str, Any]) -> str | None:
    """The assistant's answer for ``item`` (see the module), or None when there is no
    value to teach for some score."""
    values = target_scores(item, metric=metric, labels=labels)
    if values is None:
        return None
    output = metric.spec.output
    by_field = {metric.spec.scores[name].source: value for name, value in values.items()}
    if output.format == "score_tag":
        (field,) = output.fields
        label = f"{output.label} " if output.label else ""
        reason = (item.reason or "").strip()
        tag = f"{label}<{output.tag}>{_number(by_field[field])}</{output.tag}>"
        return f"{reason}\n\n{tag}" if reason else tag
    verdict: dict[str, Any] = {}
    for field, spec in output.fields.items():
        if field in by_field:
            verdict[field] = by_field[field]
        elif spec.type == "id":
            verdict[field] = item.sample_id
        elif output.reason_fields and field == output.reason_fields[0]:
            verdict[field] = item.reason
        elif output.failure is not None and field == output.failure.field:
            verdict[field] = next(value for value in spec.values
                                  if value.lower() != output.failure.equals.lower())
    return json.dumps(verdict, ensure_ascii=False)


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
