"""The alerts' label check on a cascade metric reads its labels as ``review estimate``
does: without folds the pools start no earlier than the last refit; cross-fitted, every
label of the pool counts, re-scored from its verdict's every-tier record with its fold's
thresholds (an item lacking a tier is left out, and counted). On Postgres."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from evalfleet.alerts.detector import Finding
from evalfleet.alerts.judgecheck import JudgeCheckSource, spans
from evalfleet.alerts.rule import Rule, load_rules
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.statistic import Summary
from evalfleet.core.cascade import metric_cascade_identity
from evalfleet.core.metric import Metric, MetricRegistry, load_registry
from evalfleet.core.review_slice import MetricSlice, ReviewSlice
from evalfleet.review.estimate import estimate_score
from evalfleet.store import SqlStore, VerdictKey, VerdictRecord, open_store
from evalfleet.store.queries.cascade import ThresholdBook
from evalfleet.store.queries.estimate import EstimateReads
from evalfleet.store.queries.review_queue import LabelValue, ReviewQueue
from testkit.metrics import cascade_metrics
from tests.evalfleet.alerts.conftest import write_rules

AT = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
RULE: dict[str, Any] = {
    "name": "correct_drop", "metric": "bbh_match", "score": "correct", "window": "2h",
    "interval": "10m", "min_samples": 10, "min_effect": 0.05, "mode": "baseline",
    "baseline": {"type": "trailing", "window": "6h", "gap": "0s"},
    "judge_check": {"min_labels": 20, "label_window": "6h"},
}
#: Eight hours of samples, one every two minutes; every tenth verdict's record lacks its
#: small tier (judged before the review slice sent every candidate to every tier).
SAMPLES = 240


def fill(store: SqlStore, metric: Metric) -> None:
    """Store the traffic (every sample a random review item) and label it all."""
    identity = metric_cascade_identity(metric)
    records = []
    for i in range(SAMPLES):
        at = AT - timedelta(hours=8) + timedelta(minutes=2 * i)
        value = float(i % 3 != 0)
        tried = [{"tier": 1, "model": "small", "scores": {"correct": value},
                  "confidence": 0.9},
                 {"tier": 2, "model": "large", "scores": {"correct": value},
                  "confidence": 0.99}]
        records.append(VerdictRecord(
            key=VerdictKey(f"s-{i}", "bbh_match", metric.version, identity), status="ok",
            error_class=None, error=None, reason="r", scores={"correct": value},
            raw_scores={"correct": value == 1.0}, raw_output="{}", attempts=1, latency_ms=5,
            prompt_tokens=None, completion_tokens=None, attributes={}, sample_ts=at,
            created_at=at, cascade={"identity": identity, "tier": 1, "model": "small",
                                    "confidence": 0.9, "low_confidence": False,
                                    "shadow": True, "thresholds_version": None,
                                    "tried": tried if i % 10 else tried[1:]}))
    store.save(verdicts=records, owner="w")
    queue = ReviewQueue(store)
    for item in queue.iter_items(metric="bbh_match"):
        truth = int(item.sample_id.split("-")[1]) % 3 != 0
        queue.label(item_id=item.id, reviewer="ann", comment=None, source="import",
                    labels={"correct": LabelValue(truth, float(truth))}, now=AT,
                    require_lease=False)


def finding() -> Finding:
    return Finding(segment=Segment(), current=Summary.of_values([0.5] * 60),
                   baseline=Summary.of_values([0.7] * 180), baseline_segment=None, tests=())


def estimate_labels(store: SqlStore, metric: Metric, rule: Rule) -> tuple[int, datetime]:
    """What ``review estimate`` counts for the check's window, and where its pool starts."""
    window, _ = spans(rule, segment=Segment(), baseline_segment=None, at=AT)
    found = estimate_score(EstimateReads(store), metric=metric, score="correct", segment={},
                           start=window.start, end=window.end,
                           label_start=window.labels_from, min_labels=20)
    return found.labels, found.label_start


def test_the_label_check_of_a_cascade_follows_its_refits(tmp_path: Path,
                                                         database_url: str) -> None:
    registry: MetricRegistry = load_registry(cascade_metrics(tmp_path / "metrics"))
    metric = registry.get("bbh_match")
    (rule,) = load_rules(write_rules(tmp_path / "rules.yaml", RULE), registry=registry).rules
    store = open_store(database_url, review=ReviewSlice({"bbh_match": MetricSlice(rate=1.0)}))
    try:
        fill(store, metric)
        source = JudgeCheckSource(EstimateReads(store), registry)
        book = ThresholdBook(store)
        identity = metric_cascade_identity(metric)

        before = source.check(rule, finding(), at=AT, confidence=0.9)
        assert before is not None and before["cascade_labels"] is None
        # Before any fit: the window's pool is its six hours' labels, all of them.
        assert before["window"]["labels_from"] == (AT - timedelta(hours=6)).isoformat()
        assert before["window"]["labels"] == 180

        refit_at = AT - timedelta(hours=3)
        book.save(metric="bbh_match", identity=identity, thresholds=(0.8, None),
                  report={}, now=refit_at)
        refit = source.check(rule, finding(), at=AT, confidence=0.9)
        assert refit is not None
        # Not cross-fitted: the window's labels start at the refit, as the estimate's do.
        assert "not cross-fitted" in refit["cascade_labels"]
        assert refit["window"]["labels_from"] == refit_at.isoformat()
        assert refit["window"]["labels"] == 90
        assert estimate_labels(store, metric, rule) == (90, refit_at)
        # The baseline (8 h to 2 h before) keeps its own labels: a period's own always count.
        assert refit["baseline"]["labels"] == 180

        book.save(metric="bbh_match", identity=identity, thresholds=(0.8, None),
                  report={"folds": [[0.8, None], [0.95, None]]}, now=AT - timedelta(hours=1))
        crossed = source.check(rule, finding(), at=AT, confidence=0.9)
        assert crossed is not None
        # Cross-fitted: the pool keeps its six hours, each item re-scored from its record;
        # the 18 whose record lacks the small tier are left out, and said so.
        assert "cross-fitted over 2 folds" in crossed["cascade_labels"]
        assert "18 labelled items without every tier's verdict left out" in (
            crossed["cascade_labels"])
        assert crossed["window"]["labels_from"] == (AT - timedelta(hours=6)).isoformat()
        assert crossed["window"]["labels"] == 180 - 18
        assert (crossed["window"]["not_rescored"], crossed["baseline"]["not_rescored"]) == (
            18, 18)
        assert estimate_labels(store, metric, rule) == (162, AT - timedelta(hours=6))
        assert "the window starts before that refit" in crossed["cascade_labels"]
    finally:
        store.close()
