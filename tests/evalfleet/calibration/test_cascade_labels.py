"""The review queue's rows as a cascade fit's items: labels combined and normalised, every
tier's verdict read from the verdict's cascade record, the unusable left out and counted,
unequal draws refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evalfleet.calibration.cascade_labels import queue_items
from evalfleet.core.metric import Metric, load_registry
from evalfleet.store.queries.cascade import CascadeLabelItem
from tests.helpers import cascade_metrics


@pytest.fixture
def metric(tmp_path: Path) -> Metric:
    return load_registry(cascade_metrics(tmp_path / "metrics")).get("bbh_match")


def tier(number: int, *, scores: dict[str, float] | None, confidence: float | None = 0.9,
         cost: float | None = 0.001) -> dict[str, Any]:
    return {"tier": number, "model": f"m{number}", "scores": scores, "confidence": confidence,
            "cost_usd": cost}


def row(item_id: int, cascade: Any, labels: dict[str, list[Any]], *,
        probability: float | None = 1.0) -> CascadeLabelItem:
    return CascadeLabelItem(item_id=item_id, sample_id=f"s-{item_id}", stratum=None,
                            probability=probability, cascade=cascade, labels=labels)


GOOD = {"tried": [tier(1, scores={"correct": 1.0, "reasoning": 0.5}),
                  tier(2, scores={"correct": 1.0, "reasoning": 0.75}, confidence=0.99)]}


def test_rows_become_items_and_the_unusable_are_counted(metric: Metric) -> None:
    rows = [
        row(1, GOOD, {"correct": [True, True, False], "reasoning": [4]}),
        row(2, {"tried": [tier(2, scores={"correct": 0.0, "reasoning": 0.0})]},
            {"correct": [True]}),  # judged by the last tier only: not a shadow
        row(3, None, {"correct": [True]}),  # its verdict is gone
        row(4, "hostile", {"correct": [True]}),
        row(5, GOOD, {"correct": [True, False], "reasoning": [None]}),  # a tie, "cannot say"
        row(6, {"tried": [tier(1, scores=None, confidence=None, cost=None),
                          tier(2, scores={"correct": 0.0, "reasoning": 0.0})]},
            {"correct": [False]}),
    ]
    found = queue_items(rows, metric=metric)
    assert (found.not_every_tier, found.unlabelled) == (3, 1)
    first, failed = found.items
    assert first.item.labels == {"correct": 1.0, "reasoning": 0.75}
    assert first.item.tiers[0] is not None and first.item.tiers[0].confidence == 0.9
    assert first.costs == (0.001, 0.001) and first.models == ("m1", "m2")
    assert failed.item.tiers[0] is None and failed.costs[0] is None


def test_items_drawn_with_different_probabilities_are_thinned_to_an_equal_draw(
        metric: Metric) -> None:
    """Items of a stratum drawn at 0.4 are kept at 0.1 / 0.4 = a quarter, so every kept
    item stands for the traffic at the same probability, 0.1."""
    low = [row(i, GOOD, {"correct": [True]}, probability=0.1) for i in range(400)]
    high = [row(i, GOOD, {"correct": [True]}, probability=0.4) for i in range(400, 4400)]
    found = queue_items([*low, *high], metric=metric)
    kept_high = len(found.items) - len(low)
    assert 900 < kept_high < 1100  # a quarter of 4,000, by hash
    assert found.thinned == len(high) - kept_high
    # The same items, the same choice: a refit on the same labels fits the same draw.
    assert len(queue_items([*low, *high], metric=metric).items) == len(found.items)
    found_none = queue_items([row(1, GOOD, {"correct": [True]}, probability=None)],
                             metric=metric)
    assert (found_none.items, found_none.not_every_tier) == ([], 1)
