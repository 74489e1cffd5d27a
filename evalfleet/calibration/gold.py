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

The same labels watch the judge over time: canary jobs (a rotating slice of the
gold set, fed by ``evalfleet beat``) carry their labels, and each canary verdict
adds two series per labelled score beside the production ones
(:func:`canary_series`): its agreement with the label, in 0..1, and its signed
bias. A calibration report keeps the same two series' summaries as the baseline
the ``judge_drift`` alert rule tests them against.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from evalfleet.core.errors import InvalidSample
from evalfleet.core.metric import Metric
from evalfleet.core.sample import Sample, parse_sample
from evalfleet.core.scales import ScoreScale, score_scales

#: Prefix of the agreement series of a canary score: ``canary:faithfulness``.
CANARY_AGREEMENT_PREFIX = "canary:"

#: Prefix of the bias series of a canary score: ``canary_bias:faithfulness``.
CANARY_BIAS_PREFIX = "canary_bias:"


@dataclass(frozen=True)
class GoldItem:
    """One gold sample and its labels."""

    sample: Sample
    labels: dict[str, float]
    """People's scores by score name, on the judge's scale (booleans as 0 and 1)."""


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
        name: label_value(value, scale=scales.get(name), record=record, sample_id=sample.id,
                          field=f"labels.{name}")
        for name, value in labels.items()
    })


def label_value(value: Any, *, scale: ScoreScale | None, record: str,
                sample_id: str | None, field: str) -> float:
    """A person's value for one score, checked against the score's scale.

    Args:
        value: As given: true/false for a binary score, a rubric value for an ordinal one,
            a number in range for a continuous one.
        scale: The score's scale; None when the metric has no such score.
        record, sample_id, field: Where the value came from, for the error.

    Returns:
        The value on the judge's scale (booleans as 0 and 1).

    Raises:
        InvalidSample: Naming the record, the sample and the field.
    """
    def invalid(reason: str) -> InvalidSample:
        return InvalidSample(reason, record=record, sample_id=sample_id, field=field)

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


def canary_series_names(score: str) -> tuple[str, str]:
    """The stored series names of a score's canary agreement and bias.

    Args:
        score: One of a metric's score names.

    Returns:
        ``(agreement series, bias series)``; the prefixes keep them apart from the
        production series of the same score.
    """
    return CANARY_AGREEMENT_PREFIX + score, CANARY_BIAS_PREFIX + score


def label_agreement(judge: float, label: float, *, scale: ScoreScale) -> tuple[float, float]:
    """How far one judged value agrees with its label.

    Args:
        judge: The judge's value, on its own scale.
        label: People's value, on the same scale.
        scale: The score's kind and range.

    Returns:
        ``(agreement, bias)``: agreement in 0..1 (binary: 1 when equal else 0; others
        1 - |judge - label| / range), and the signed bias (judge - label) / range in -1..1.
    """
    if scale.kind == "binary":
        return (1.0 if judge == label else 0.0), judge - label
    spread = (scale.high - scale.low) or 1.0
    bias = (judge - label) / spread
    return 1.0 - abs(bias), bias


def canary_series(raw_scores: Mapping[str, Any], labels: Mapping[str, float], *,
                  scales: Mapping[str, ScoreScale]) -> dict[str, float]:
    """The canary series values of one verdict against its gold labels.

    A score the judge left null, one whose value is not a finite number, or one with no
    label or scale adds nothing: a verdict that failed to parse adds no series at all
    (its caller passes no scores).

    Args:
        raw_scores: The verdict's values on the judge's scale (booleans as they came).
        labels: The gold labels by score name.
        scales: The metric's score scales (:func:`score_scales`).

    Returns:
        By series name (:func:`canary_series_names`): agreement and bias values.
    """
    series: dict[str, float] = {}
    for name, label in labels.items():
        scale, raw = scales.get(name), raw_scores.get(name)
        if scale is None or raw is None or isinstance(raw, str):
            continue
        try:
            value = float(raw)
        except (TypeError, ValueError):
            continue
        if not math.isfinite(value) or not math.isfinite(label):
            continue
        agreement_name, bias_name = canary_series_names(name)
        series[agreement_name], series[bias_name] = label_agreement(value, label, scale=scale)
    return series
