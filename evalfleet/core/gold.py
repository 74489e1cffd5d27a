"""Gold sets: samples with the scores people gave them. Pure apart from reading the file.

A gold file is the sample format (JSONL) with one more key per record, ``labels``:
the score each person-checked score should get, on the judge's own scale
(``{"correct": true, "reasoning": 4}`` for ``bbh_match``, ``{"faithfulness": 1.0}``
for ``rag_qa``). A record may label some of a metric's scores only. A bad record is
reported with its line, id and field; the others are used.

Each built-in metric ships a small gold set (``evalfleet/core/gold/``) written
for this project, whose labels follow from how its samples were built: an answer
copied from its context is faithful, one that contradicts it is not; a BIG-Bench
Hard answer is right or wrong against its ground truth.

The same labels watch the judge over time: canary jobs (a rotating slice of the
gold set, fed by ``evalfleet beat``) carry their labels, and each canary verdict
adds two series per labelled score beside the production ones
(:func:`evalfleet.core.canary.canary_series`): its agreement with the label, in 0..1, and its signed
bias. A calibration report keeps the same two series' summaries as the baseline
the ``judge_drift`` alert rule tests them against.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from evalfleet.core.errors import InvalidSample
from evalfleet.core.metric import Metric
from evalfleet.core.sample import Sample, parse_sample
from evalfleet.core.scales import ScoreScale, label_value, score_scales


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
    path = Path(str(resources.files("evalfleet.core") / "gold" / f"{metric}.jsonl"))
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
