"""What a score's values mean to the people labelling it: a metric's guide file.

A guide sits beside its metric file, named ``<metric>.guide.yaml``: per score, values on
the score's own (raw) scale and what each means, in the words of the metric's prompt::

    context_precision:
      0.0: completely inaccurate, off-topic or incorrect
      1.0: perfectly accurate, matches the expected answer

The review page shows it under each score. It is not part of the prompt version: the
judge never reads it, so editing it leaves verdicts and their key alone. A metric with
no guide file shows its description and each score's range only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from evalfleet.core.metric import GUIDE_SUFFIX, Metric
from evalfleet.core.scales import score_scales

#: Longest text of one value, in characters.
MAX_TEXT = 500

#: Most values one score's guide may describe.
MAX_ANCHORS = 20


@dataclass(frozen=True, slots=True)
class Anchor:
    """One value of a score and what it means."""

    value: float
    """On the score's raw scale."""
    meaning: str


class InvalidGuide(ValueError):
    """A guide file that cannot be read; the message names the file and the entry."""


def guide_path(metric: Metric) -> Path:
    """Where ``metric``'s guide file is (it may not exist)."""
    return Path(metric.path).with_name(f"{metric.name}{GUIDE_SUFFIX}")


def load_guide(metric: Metric) -> dict[str, tuple[Anchor, ...]]:
    """``metric``'s guide, by score, each score's anchors in increasing value.

    Returns:
        An empty mapping when the metric has no guide file.

    Raises:
        InvalidGuide: Naming the file and the score or value that is wrong.
    """
    path = guide_path(metric)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise InvalidGuide(f"{path}: cannot be read: {exc.strerror}") from None
    try:
        data = yaml.safe_load(raw)
    except (yaml.YAMLError, RecursionError):
        raise InvalidGuide(f"{path}: not valid YAML") from None
    return parse_guide(data, metric=metric, where=str(path))


def parse_guide(data: Any, *, metric: Metric, where: str) -> dict[str, tuple[Anchor, ...]]:
    """A guide file's content checked against ``metric``'s scores. Pure.

    Raises:
        InvalidGuide: Naming ``where`` and the score or value that is wrong.
    """
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InvalidGuide(f"{where}: must map score names to values and their meaning")
    scales = score_scales(metric)
    guide: dict[str, tuple[Anchor, ...]] = {}
    for score, values in data.items():
        if score not in scales:
            raise InvalidGuide(f"{where}: {str(score)[:64]!r} is not a score of {metric.name}")
        scale = scales[score]
        guide[score] = _anchors(values, low=scale.low, high=scale.high,
                                where=f"{where}: {score}")
    return guide


def _anchors(values: Any, *, low: float, high: float, where: str) -> tuple[Anchor, ...]:
    if not isinstance(values, dict) or not values or len(values) > MAX_ANCHORS:
        raise InvalidGuide(f"{where}: must map 1 to {MAX_ANCHORS} values to what they mean")
    anchors = []
    for value, meaning in values.items():
        number = float(value) if isinstance(value, int | float) else math.nan
        if isinstance(value, bool) or not low <= number <= high:
            raise InvalidGuide(f"{where}: {str(value)[:32]!r} is not a value from {low:g} "
                               f"to {high:g}")
        if not isinstance(meaning, str) or not meaning.strip() or len(meaning) > MAX_TEXT:
            raise InvalidGuide(f"{where}: {number:g} needs a text of 1 to {MAX_TEXT} "
                               "characters")
        anchors.append(Anchor(number, " ".join(meaning.split())))
    return tuple(sorted(anchors, key=lambda anchor: anchor.value))
