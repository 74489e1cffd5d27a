"""Reading labelled cascade items, and the status: thresholds, shares, cost per 1,000."""

from __future__ import annotations

import json
from typing import Any

import pytest

from evalfleet.calibration.cascade import Guarantee
from evalfleet.calibration.cascade_status import cascade_status, read_items

KINDS = {"correct": "binary"}


def line(label: float, *tiers: dict[str, Any] | None) -> str:
    return json.dumps({"labels": {"correct": label}, "tiers": list(tiers)})


def tier(model: str, score: float, confidence: float | None, cost: float | None) -> dict[str, Any]:
    return {"model": model, "scores": {"correct": score}, "confidence": confidence,
            "cost_usd": cost}


def test_status_of_a_two_tier_cascade() -> None:
    # 60 items the small judge is sure of and right on; 60 it is unsure of and wrong on,
    # which the large judge gets right.
    lines = [line(1.0, tier("nano", 1.0, 0.99, 0.0001), tier("large", 1.0, 0.97, 0.002))] * 60
    lines += [line(0.0, tier("nano", 1.0, 0.6, 0.0001), tier("large", 0.0, 0.97, 0.002))] * 60
    items, problems = read_items(lines)
    assert problems == [] and len(items) == 120
    status = cascade_status(items, kinds=KINDS, guarantee=Guarantee())
    first, second = status.tiers
    assert (first.model, first.threshold, first.labels, first.accepted) == (
        "nano", pytest.approx(0.99), 120, 60)
    assert (second.model, second.labels, second.accepted) == ("large", 60, 60)
    assert first.settled_share == pytest.approx(0.5)
    assert status.fit.low_confidence_share == 0.0
    # Every item pays the small call; half pay the large one too.
    assert status.usd_per_1000 == pytest.approx(1000 * (0.0001 + 0.5 * 0.002))
    assert status.last_tier_usd_per_1000 == pytest.approx(2.0)


def test_an_unknown_cost_on_the_path_makes_the_cost_unknown() -> None:
    lines = [line(1.0, tier("nano", 1.0, 0.2, None), tier("large", 1.0, 0.99, 0.002))] * 60
    status = cascade_status(read_items(lines)[0], kinds=KINDS, guarantee=Guarantee())
    assert status.usd_per_1000 is None and status.last_tier_usd_per_1000 == pytest.approx(2.0)


@pytest.mark.parametrize(("text", "problem"), [
    ("[1, 2]", "line 1: not a JSON object"),
    ("{", "line 1: "),
    ('{"labels": {"correct": 1}}', "line 1: tiers: a list of 1 to 8"),
    ('{"labels": {"correct": 1}, "tiers": []}', "line 1: tiers: a list"),
    ('{"labels": [1], "tiers": [null]}', "line 1: labels: an object of scores"),
    ('{"labels": {"correct": 2}, "tiers": [null]}', "line 1: labels.correct: not a number"),
    ('{"labels": {"correct": true}, "tiers": [null]}', "line 1: labels.correct: not a number"),
    ('{"labels": {"correct": 1}, "tiers": [5]}', "line 1: tiers[0]: not an object"),
    ('{"labels": {"correct": 1}, "tiers": [{"scores": {"correct": 1}, "confidence": NaN}]}',
     "line 1: tiers[0].confidence: not a number in 0..1"),
    ('{"labels": {"correct": 1}, "tiers": [{"scores": {"correct": 1}, "confidence": 0.5,'
     ' "cost_usd": -1}]}', "line 1: tiers[0].cost_usd: not a cost"),
    ("[" * 100_000, "line 1: "),
])
def test_bad_lines_are_named_and_the_rest_goes_on(text: str, problem: str) -> None:
    good = line(1.0, tier("nano", 1.0, 0.9, 0.0001))
    items, problems = read_items([text, "", good])
    assert len(items) == 1
    assert len(problems) == 1 and problems[0].startswith(problem)
