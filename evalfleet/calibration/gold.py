"""Gold sets: samples with the scores people gave them. Pure apart from reading the file.

A gold file is the sample format (JSONL) with one more key per record, ``labels``:
the score each person-checked score should get, on the judge's own scale
(``{"correct": true, "reasoning": 4}`` for ``bbh_match``, ``{"faithfulness": 1.0}``
for ``rag_qa``). A record may label some of a metric's scores only. A bad record is
reported with its line, id and field; the others are used.

Each built-in metric ships a small gold set (``evalfleet/calibration/gold/``) written
for this project, whose labels follow from how its samples were built: an answer
copied from its context is faithful, one that contradicts it is not; a BIG-Bench
Hard answer is right or wrong against its ground truth.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from evalfleet.calibration.agreement import ScoreKind
from evalfleet.core.errors import InvalidSample
from evalfleet.core.metric import Metric
from evalfleet.core.sample import Sample, parse_sample


@dataclass(frozen=True)
class GoldItem:
    """One gold sample and its labels."""

    sample: Sample
    labels: dict[str, float]
    """People's scores by score name, on the judge's scale (booleans as 0 and 1)."""


@dataclass(frozen=True)
class ScoreScale:
    """How one of a metric's scores is compared."""

    kind: ScoreKind
    categories: tuple[float, ...] = ()
    """Ordinal scores: every rubric value, in order."""
    low: float = 0.0
    high: float = 1.0


def score_scales(metric: Metric) -> dict[str, ScoreScale]:
    """The kind and range of each of ``metric``'s scores, from its output spec.

    Args:
        metric: A metric.

    Returns:
        By score name: ``binary`` for a boolean, ``ordinal`` (with its rubric values)
        for an integer, ``continuous`` for a number.
    """
    scales: dict[str, ScoreScale] = {}
    for name, score in metric.spec.scores.items():
        spec = metric.spec.output.fields[score.source]
        if spec.type == "boolean":
            scales[name] = ScoreScale("binary", low=0.0, high=1.0)
        elif spec.type == "integer":
            assert spec.minimum is not None and spec.maximum is not None
            values = tuple(float(v) for v in range(int(spec.minimum), int(spec.maximum) + 1))
            scales[name] = ScoreScale("ordinal", values, low=spec.minimum, high=spec.maximum)
        else:
            scales[name] = ScoreScale("continuous", low=spec.minimum or 0.0,
                                      high=spec.maximum if spec.maximum is not None else 1.0)
    return scales


def bundled_gold(metric: str) -> Path:
    """The gold set shipped for a built-in metric.

    Raises:
        FileNotFoundError: When ``metric`` has no bundled gold set.
    """
    path = Path(str(resources.files("evalfleet.calibration") / "gold" / f"{metric}.jsonl"))
    if not path.is_file():
        raise FileNotFoundError(f"no gold set is shipped for metric {metric!r}")
    return path


def load_gold(path: Path, *, metric: Metric) -> tuple[list[GoldItem], list[InvalidSample]]:
    """Read a gold file for ``metric``.

    Args:
        path: The JSONL file.
        metric: The metric its labels are for.

    Returns:
        The good items, and one error per bad record (line, id and field named).
    """
    scales = score_scales(metric)
    items: list[GoldItem] = []
    errors: list[InvalidSample] = []
    seen: set[str] = set()
    with path.open("rb") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                item = _item(line, record=f"{path.name}: line {number}", scales=scales)
            except InvalidSample as exc:
                errors.append(exc)
                continue
            if item.sample.id in seen:
                errors.append(InvalidSample("duplicate id", record=f"{path.name}: line {number}",
                                            sample_id=item.sample.id, field="id"))
                continue
            seen.add(item.sample.id)
            items.append(item)
    return items, errors


def _item(line: bytes, *, record: str, scales: dict[str, ScoreScale]) -> GoldItem:
    try:
        data = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise InvalidSample(f"not JSON: {exc}", record=record) from None
    if not isinstance(data, dict):
        raise InvalidSample("expected a JSON object", record=record)
    labels = data.pop("labels", None)
    sample = parse_sample(data, record=record)
    if not isinstance(labels, dict) or not labels:
        raise InvalidSample("expected an object of scores", record=record, sample_id=sample.id,
                            field="labels")
    return GoldItem(sample, {
        name: _label(value, scale=scales.get(name), record=record, sample=sample,
                     field=f"labels.{name}")
        for name, value in labels.items()
    })


def _label(value: Any, *, scale: ScoreScale | None, record: str, sample: Sample,
           field: str) -> float:
    def invalid(reason: str) -> InvalidSample:
        return InvalidSample(reason, record=record, sample_id=sample.id, field=field)

    if scale is None:
        raise invalid("not a score of this metric")
    if scale.kind == "binary":
        if not isinstance(value, bool):
            raise invalid("expected true or false")
        return float(value)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise invalid("expected a number")
    if not scale.low <= value <= scale.high:
        raise invalid(f"{value} is outside {scale.low:g}..{scale.high:g}")
    if scale.kind == "ordinal" and float(value) not in scale.categories:
        raise invalid(f"{value} is not one of the rubric's values")
    return float(value)
