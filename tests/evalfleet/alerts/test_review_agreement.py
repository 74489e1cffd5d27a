"""review_agreement rules and the agreement gauges, through the store: verdicts queued at
random, labelled by people, a judge that starts disagreeing with labels it used to match."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from sklearn.metrics import accuracy_score, cohen_kappa_score

from evalfleet.alerts import AlertEngine, open_alert_engine
from evalfleet.alerts.review_agreement import weighted_summary
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.telemetry import AlertTelemetry
from evalfleet.alerts.terminal import render_alert_view
from evalfleet.alerts.view import load_alert_view
from evalfleet.core.review_slice import MetricSlice, ReviewSlice
from evalfleet.core.settings import Settings
from evalfleet.store import SqlStore, VerdictKey, VerdictRecord, open_store
from evalfleet.store.queries.review_queue import LabelValue, ReviewQueue
from tests.evalfleet.alerts.conftest import write_rules

#: One slot of items and one evaluation interval.
SLOT = timedelta(minutes=10)
PER_SLOT = 10

#: The first item, aligned to the slot, a little in the past.
T0 = datetime.fromtimestamp(
    (datetime.now(UTC) - timedelta(days=1)).timestamp() // 600 * 600, tz=UTC)

RULE = {"name": "agreement_drop", "kind": "review_agreement", "metric": "bbh_match",
        "score": "correct", "window": "1h", "interval": "10m", "min_samples": 20,
        "min_effect": 0.1, "mode": "both", "threshold": 0.6, "for": 2,
        "baseline": {"type": "trailing", "window": "3h"}}


def record(n: int, *, judge: bool, at: datetime, model: str = "judge-1") -> VerdictRecord:
    return VerdictRecord(
        key=VerdictKey(f"s{n}", "bbh_match", "v1", model), status="ok", error_class=None,
        error=None, reason="because", scores={"correct": float(judge), "reasoning": 0.5},
        raw_scores={"correct": judge, "reasoning": 3}, raw_output="{}", attempts=1,
        latency_ms=5, prompt_tokens=None, completion_tokens=None, attributes={"app": "bot"},
        sample_ts=at, created_at=at,
        sample={"input": "q", "output": "a", "context": [], "reference": None, "fields": {}})


def truth(n: int) -> bool:
    return n % 3 != 0


def store_slot(store: SqlStore, slot: int, *, agreeing_every: int) -> None:
    """A slot of random items, labelled: the judge disagrees with people on every
    ``agreeing_every``-th item."""
    at = T0 + slot * SLOT
    numbers = range(slot * PER_SLOT, (slot + 1) * PER_SLOT)
    store.save(verdicts=[record(n, judge=truth(n) != (n % agreeing_every == 0),
                                at=at + timedelta(seconds=i))
                         for i, n in enumerate(numbers)], owner="w")
    queue = ReviewQueue(store)
    for item in queue.iter_items(since=at, until=at + SLOT):
        n = int(item.sample_id[1:])
        # Every seventh item's reviewer cannot say: left out, never counted.
        given = None if n % 7 == 0 else truth(n)
        queue.label(item_id=item.id, reviewer="ann", labels={
            "correct": LabelValue(raw=given, value=None if given is None else float(given))},
            comment=None, source="import", now=at, require_lease=False)


@pytest.fixture
def reviewing_store(database_url: str) -> Iterator[SqlStore]:
    """The test database, opened as a worker that queues every bbh_match verdict."""
    store = open_store(database_url, pool_size=2,
                       review=ReviewSlice({"bbh_match": MetricSlice(rate=1.0)}))
    yield store  # type: ignore[misc]
    store.close()


def test_fires_when_the_judge_stops_matching_labels_and_is_quiet_on_steady_days(
        reviewing_store: SqlStore, open_engine: Callable[..., AlertEngine]) -> None:
    engine = open_engine(RULE)
    events: list[tuple[int, str, str]] = []
    # 10 hours: 6 steady (the judge agrees on 9 items in 10), 2 of a judge that agrees on
    # half, 2 steady again.
    for slot in range(60):
        bad = 36 <= slot < 48
        store_slot(reviewing_store, slot, agreeing_every=2 if bad else 10)
        if slot < 24:
            continue  # a full baseline and window first
        report = engine.check(at=T0 + (slot + 1) * SLOT)
        events += [(slot, segment, event) for _rule, segment, event in report.events]
        whole = next(row for row in report.rows if row.segment == "(all)")
        if slot < 36:
            assert whole.state == "ok", (slot, whole)
            assert whole.n >= 40 and whole.mean == pytest.approx(0.9, abs=0.03)
    assert all(slot >= 36 for slot, _segment, _event in events), events
    fired = [(slot, segment) for slot, segment, event in events if event == "firing"]
    assert ("(all)" in {segment for _slot, segment in fired}
            and "judge_model=judge-1" in {segment for _slot, segment in fired})
    assert min(slot for slot, _segment in fired) <= 40  # within 5 slots of the change
    resolved = [slot for slot, segment, event in events
                if event == "resolved" and segment == "(all)"]
    assert resolved and min(resolved) >= 48


def test_a_floor_alone_fires_without_a_trailing_level(
        reviewing_store: SqlStore, open_engine: Callable[..., AlertEngine]) -> None:
    engine = open_engine({**RULE, "mode": "threshold", "threshold": 0.8, "for": 1})
    for slot in range(6):
        store_slot(reviewing_store, slot, agreeing_every=2)
    report = engine.check(at=T0 + 6 * SLOT)
    whole = next(row for row in report.rows if row.segment == "(all)")
    assert whole.state == "firing" and whole.mean == pytest.approx(0.5, abs=0.05)
    view = load_alert_view(reviewing_store, engine.rules.rules[0], Segment())
    assert view.finding["tests"][0]["against"] == "threshold"
    assert "evidence" not in view.finding  # a review_agreement alert's is in the queue
    text = render_alert_view(view)
    assert "judge against reviewers: live agreement on score correct of bbh_match" in text


def test_the_gauges_carry_the_review_status_figures(
        reviewing_store: SqlStore, database_url: str, tmp_path: Path) -> None:
    for slot in range(6):
        store_slot(reviewing_store, slot, agreeing_every=10)
    registry = CollectorRegistry()
    settings = Settings(database_url=database_url,
                        alert_rules_file=write_rules(tmp_path / "rules.yaml", RULE))
    engine = open_alert_engine(settings, telemetry=AlertTelemetry(registry), deliver=False)
    try:
        engine.check(at=T0 + 6 * SLOT)
    finally:
        engine.close()
    text = generate_latest(registry).decode()
    numbers = [n for n in range(6 * PER_SLOT) if n % 7 != 0]
    people = [truth(n) for n in numbers]
    judge = [truth(n) != (n % 10 == 0) for n in numbers]
    key = 'judge_model="judge-1",metric="bbh_match",score="correct"'
    found = {line.split("{")[0] + line[line.index("statistic="):line.index("}")]:
             float(line.rsplit(" ", 1)[1])
             for line in text.splitlines() if key in line and "statistic=" in line}
    assert found['evalfleet_review_agreementstatistic="accuracy"'] == pytest.approx(
        accuracy_score(people, judge))
    assert found['evalfleet_review_agreementstatistic="kappa"'] == pytest.approx(
        cohen_kappa_score(people, judge))
    assert (found['evalfleet_review_agreement_lowstatistic="accuracy"']
            <= accuracy_score(people, judge)
            <= found['evalfleet_review_agreement_highstatistic="accuracy"'])
    assert f"evalfleet_review_agreement_items{{{key}}} {float(len(numbers))}" in text


def test_a_weighted_summary_keeps_the_weighted_mean_and_the_effective_count() -> None:
    rng = np.random.default_rng(7)
    values = rng.random(400)
    weights = 1.0 / rng.choice([0.05, 0.5], size=400)
    summary = weighted_summary(list(values), list(weights), binary=False)
    effective = weights.sum() ** 2 / (weights ** 2).sum()
    assert summary.n == round(effective)
    assert summary.mean == pytest.approx(np.average(values, weights=weights))
    variance = np.average((values - summary.mean) ** 2, weights=weights)
    assert summary.total_sq / summary.n - summary.mean ** 2 == pytest.approx(variance)
    agreed = weighted_summary([1.0, 0.0, 1.0], [2.0, 10.0, 2.0], binary=True)
    assert agreed.n == 2 and agreed.total == 1.0  # 4/14 of an effective 2 items
    assert weighted_summary([], [], binary=True).n == 0
