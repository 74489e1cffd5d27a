"""The label check's pure parts: which pools a rule's periods take, the verdict from two
intervals, and the line people read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from evalfleet.alerts.judgecheck import (
    CONFIRMED,
    JUDGE_BIAS_CHANGED,
    NOT_CONFIRMED,
    check_line,
    decide,
    spans,
)
from evalfleet.alerts.rule import Rule, load_rules
from evalfleet.alerts.segment import Segment
from evalfleet.core.errors import InvalidAlertRule
from evalfleet.core.estimator import Interval
from evalfleet.core.metric import load_registry
from tests.evalfleet.alerts.conftest import write_rules

AT = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def rule(tmp_path: Path, **fields: Any) -> Rule:
    path = write_rules(tmp_path / "rules.yaml", {"name": "r", **fields})
    (found,) = load_rules(path, registry=load_registry()).rules
    return found


def test_a_pinned_baseline_pools_the_other_value_over_its_own_window(tmp_path: Path) -> None:
    pinned = rule(tmp_path, window="1h", judge_check={"label_window": "3d"},
                  baseline={"type": "pinned", "key": "prompt_version", "value": "previous",
                            "window": "7d"})
    now = Segment((("prompt_version", "v2"),))
    before = Segment((("prompt_version", "v1"),))
    window, baseline = spans(pinned, segment=now, baseline_segment=before, at=AT)
    assert (window.start, window.labels_from) == (AT - timedelta(hours=1), AT - timedelta(days=3))
    assert baseline is not None and baseline.segment == before
    # The baseline's own week is longer than the pool: the pool is the period itself.
    assert baseline.labels_from == baseline.start == AT - timedelta(days=7)
    assert spans(pinned, segment=now, baseline_segment=None, at=AT)[1] is None
    floor = rule(tmp_path, mode="threshold", threshold=0.7)
    assert spans(floor, segment=Segment(), baseline_segment=None, at=AT)[1] is None


def test_a_label_window_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(InvalidAlertRule, match="label_window"):
        rule(tmp_path, judge_check={"label_window": "0s"})
    with pytest.raises(InvalidAlertRule, match="min_labels"):
        rule(tmp_path, judge_check={"min_labels": 3})


DOWN, FLAT, UP = Interval(-0.1, -0.15, -0.05), Interval(0.0, -0.05, 0.05), \
    Interval(0.1, 0.05, 0.15)


@pytest.mark.parametrize(("change", "bias", "direction", "pooled", "verdict"), [
    (DOWN, FLAT, "decrease", False, CONFIRMED),
    (DOWN, FLAT, "decrease", True, CONFIRMED),
    (FLAT, DOWN, "decrease", False, JUDGE_BIAS_CHANGED),
    (DOWN, DOWN, "decrease", False, CONFIRMED),  # own labels: people's drop stands
    (DOWN, DOWN, "decrease", True, JUDGE_BIAS_CHANGED),  # pooled: the assumption fell
    (FLAT, UP, "decrease", True, NOT_CONFIRMED),  # a lenient judge explains no drop
    (FLAT, FLAT, "decrease", False, NOT_CONFIRMED),
    (UP, FLAT, "increase", False, CONFIRMED),
    (FLAT, UP, "increase", False, JUDGE_BIAS_CHANGED),
    (DOWN, FLAT, "increase", False, NOT_CONFIRMED),
])
def test_the_verdict(change: Interval, bias: Interval, direction: Any, pooled: bool,
                     verdict: str) -> None:
    assert decide(change, bias, direction=direction, pooled=pooled) == verdict


def test_the_line_of_a_check() -> None:
    check = {"verdict": CONFIRMED, "min_labels": 100, "raw_change": -0.12,
             "window": {"labels": 140}, "baseline": {"labels": 400}, "shared_labels": 0,
             "corrected_change": {"value": -0.1, "low": -0.15, "high": -0.05},
             "bias_change": {"value": -0.02, "low": -0.04, "high": 0.0}}
    assert check_line(check) == (
        "people's labels: confirmed; corrected change -0.100 [-0.150, -0.050] against raw "
        "-0.120; judge bias change -0.020 [-0.040, +0.000]; labels 140 window / 400 "
        "baseline, at least 100 each")
    floor = {"verdict": NOT_CONFIRMED, "min_labels": 100, "threshold": 0.7,
             "window": {"labels": 120, "corrected": {"value": 0.72, "low": 0.69,
                                                     "high": 0.75}}}
    assert check_line(floor) == (
        "people's labels: not confirmed; corrected window mean 0.720 [0.690, 0.750] against "
        "threshold 0.700; labels 120 window, at least 100 each")
