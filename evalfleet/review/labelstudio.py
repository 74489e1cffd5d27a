"""Labels back from Label Studio: its JSON export read as label lines. Pure.

The tasks came from ``evalfleet review pending --format label-studio``, so each carries
``data.item_id``. In the project's labeling config each control is named for a score of
the metric (``<Choices name="correct" ...>``, ``<Rating name="reasoning" ...>``,
``<Number name="faithfulness" ...>``); a ``<TextArea name="comment">`` becomes the
comment. Each annotation (not cancelled) of a task is one reviewer,
``label-studio:<completed_by>``, and each of its results one label line by item id, so
the labels keep the item's reason and probability.

Choices are read as the judge's scale: ``yes``/``true`` and ``no``/``false`` for a yes/no
score, a number for a rubric or a 0..1 score, ``cannot say`` (or ``null``) for none; the
import checks the value against the score's scale and names what does not fit.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from evalfleet.core.errors import InvalidSample

#: Choice texts that mean a yes/no value or "cannot say" (compared in lower case).
_YES = ("yes", "true")
_NO = ("no", "false")
_NONE = ("cannot say", "null", "none", "n/a")

#: The control whose text is the annotation's comment.
COMMENT_CONTROL = "comment"


def label_studio_lines(data: bytes, *, source_name: str = ""
                       ) -> Iterator[tuple[str, bytes | InvalidSample]]:
    """Label lines from a Label Studio JSON export, each named for its errors.

    Args:
        data: The export (a JSON list of tasks).
        source_name: The file's name, for errors.

    Returns:
        ``(record, line)`` pairs; a part that cannot be read gives an error in place of
        its line, and the rest goes on.
    """
    name = source_name or "export"
    try:
        tasks = json.loads(data)
    except (ValueError, RecursionError) as exc:
        yield name, InvalidSample(f"not JSON: {exc}", record=name)
        return
    if not isinstance(tasks, list):
        yield name, InvalidSample("expected a JSON list of tasks", record=name)
        return
    where = f"{source_name}: " if source_name else ""
    for number, task in enumerate(tasks, 1):
        yield from _task_lines(task, record=f"{where}task {number}")


def _task_lines(task: Any, *, record: str) -> Iterator[tuple[str, bytes | InvalidSample]]:
    data = task.get("data") if isinstance(task, dict) else None
    item_id = data.get("item_id") if isinstance(data, dict) else None
    if isinstance(item_id, bool) or not isinstance(item_id, int):
        yield record, InvalidSample("no whole-number data.item_id (export the tasks from "
                                    "evalfleet review pending)", record=record,
                                    field="data.item_id")
        return
    annotations = task.get("annotations") or []
    if not isinstance(annotations, list):
        yield record, InvalidSample("expected a list", record=record, field="annotations")
        return
    for n, annotation in enumerate(annotations, 1):
        if not isinstance(annotation, dict) or annotation.get("was_cancelled"):
            continue
        yield from _annotation_lines(annotation, item_id=item_id,
                                     record=f"{record}, annotation {n}")


def _annotation_lines(annotation: dict[str, Any], *, item_id: int, record: str
                      ) -> Iterator[tuple[str, bytes | InvalidSample]]:
    results = annotation.get("result") or []
    if not isinstance(results, list):
        yield record, InvalidSample("expected a list", record=record, field="result")
        return
    results = [r for r in results if isinstance(r, dict)]
    comment = next((_text(r) for r in results if r.get("from_name") == COMMENT_CONTROL), None)
    reviewer = f"label-studio:{_annotator(annotation.get('completed_by'))}"
    for result in results:
        score = result.get("from_name")
        if score == COMMENT_CONTROL:
            continue
        named = f"{record}, {score}"
        try:
            value = _value(result.get("value"), record=named)
        except InvalidSample as exc:
            yield named, exc
            continue
        line = {"item_id": item_id, "score": score, "value": value, "reviewer": reviewer}
        if comment:
            line["comment"] = comment
        yield named, json.dumps(line).encode()


def _value(value: Any, *, record: str) -> Any:
    """The label a result's value stands for, on the judge's scale (None: cannot say)."""
    if not isinstance(value, dict):
        raise InvalidSample("expected an object", record=record, field="value")
    if "choices" in value:
        choices = value["choices"]
        if not isinstance(choices, list) or len(choices) != 1:
            raise InvalidSample("expected one choice", record=record, field="value.choices")
        return _choice(choices[0])
    for kind in ("rating", "number"):
        if kind in value:
            return value[kind]
    raise InvalidSample("expected choices, rating or number", record=record, field="value")


def _choice(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    lowered = text.strip().lower()
    if lowered in _YES or lowered in _NO:
        return lowered in _YES
    if lowered in _NONE:
        return None
    try:
        number = float(lowered)
    except ValueError:
        return text  # the import names it as off the score's scale
    return int(number) if number.is_integer() else number


def _text(result: dict[str, Any]) -> str | None:
    value = result.get("value")
    text = value.get("text") if isinstance(value, dict) else None
    if isinstance(text, list):
        text = "\n".join(str(part) for part in text)
    return text[:10_000] if isinstance(text, str) and text.strip() else None


def _annotator(completed_by: Any) -> str:
    if isinstance(completed_by, dict):
        completed_by = completed_by.get("email") or completed_by.get("id")
    return str(completed_by)[:100] if completed_by is not None else "unknown"
