"""Agreement per segment: each attribute value with enough labels, against scikit-learn."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sklearn.metrics import accuracy_score, cohen_kappa_score

from evalfleet.core.live_agreement import ALL, live_agreement, segment_agreement
from evalfleet.core.metric import load_registry
from tests.evalfleet.core.test_live_agreement import RESAMPLES, item, label


def test_segments_with_enough_labels_get_their_own_figures() -> None:
    # app=a: 30 items, the judge right on all but every fifth; app=b: 5 items (too few);
    # one item without the attribute is in no segment.
    items, labels, people, judge = [], [], [], []
    for n in range(30):
        truth, said = n % 3 != 0, (n % 3 != 0) != (n % 5 == 0)
        items.append(replace(item(n, correct=said), attributes={"app": "a"}))
        labels.append(label(n, truth))
        people.append(truth)
        judge.append(said)
    for n in range(30, 35):
        items.append(replace(item(n, correct=False), attributes={"app": "b"}))
        labels.append(label(n, True))
    items.append(item(99, correct=True))
    labels.append(label(99, True))
    registry = load_registry()
    found = segment_agreement(items, labels, registry=registry, key="app",
                              n_resamples=RESAMPLES)
    assert {(a.segment, a.score) for a in found} == {("app=a", "correct")}
    (entry,) = found
    assert entry.items == 30
    assert entry.statistics["accuracy"].value == pytest.approx(accuracy_score(people, judge))
    assert entry.statistics["kappa"].value == pytest.approx(cohen_kappa_score(people, judge))
    whole = live_agreement(items, labels, registry=registry, n_resamples=RESAMPLES)
    assert [(a.segment, a.items) for a in whole if a.score == "correct"] == [(ALL, 36)]
    hostile = segment_agreement(items, labels, registry=registry, key="<b>")
    assert hostile == []
