"""An alert on the judge's means that asks people's labels whether the drop is real.

Through the real alert engine on Postgres, delivering to a real HTTP receiver: verdicts of
a simulated judge are stored by a worker's store that queues a random slice for review,
the slice is labelled with the ground truth, and one evaluation fires. Three cases: the
judge turned harsher in the window while people's scores stayed (the raw drop is the
judge's), people's scores dropped under a steadily lenient judge (real), and a slice too
thin to say.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from click.testing import CliRunner

from evalfleet.alerts import AlertEngine
from evalfleet.alerts.judgecheck import (
    CONFIRMED,
    JUDGE_BIAS_CHANGED,
    TOO_FEW_LABELS,
    Span,
    spans,
)
from evalfleet.alerts.rule import load_rules
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.view import load_alert_view
from evalfleet.cli import main
from evalfleet.cli.ui import build_ui_app
from evalfleet.core.metric import load_registry
from evalfleet.core.review_slice import MetricSlice, ReviewSlice, Stratum
from evalfleet.core.settings import Settings
from evalfleet.review.estimate import estimate_score
from evalfleet.store import SqlStore, VerdictKey, VerdictRecord, open_store
from evalfleet.store.queries.estimate import EstimateReads
from evalfleet.store.queries.review_queue import LabelValue, ReviewQueue
from testkit.served import Served
from tests.evalfleet.alerts.conftest import write_rules
from tests.evalfleet.alerts.receiver import Receiver

#: The evaluation: the window is the two hours before it, the baseline the six before that.
AT = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
RULE: dict[str, Any] = {
    "name": "faithfulness_drop", "window": "2h", "interval": "10m", "min_samples": 30,
    "min_effect": 0.05, "mode": "baseline", "for": 1,
    "baseline": {"type": "trailing", "window": "6h", "gap": "0s"},
    "judge_check": {"min_labels": 50},
}
PER_MINUTE = 10


def traffic(*, seed: int, people_drop: float, judge_drop: float) -> tuple[
        list[VerdictRecord], dict[str, float]]:
    """Eight hours of verdicts before ``AT``; in the last two people's scores fall by
    ``people_drop`` and the judge's by ``judge_drop`` more. The judge is 0.1 lenient."""
    rng = np.random.default_rng(seed)
    n = 8 * 60 * PER_MINUTE
    moments = [AT - timedelta(hours=8) + timedelta(minutes=i / PER_MINUTE) for i in range(n)]
    in_window = np.array([m >= AT - timedelta(hours=2) for m in moments])
    truth = np.clip(rng.normal(0.75, 0.1, n) - np.where(in_window, people_drop, 0.0), 0, 1)
    judge = np.clip(truth + 0.1 - np.where(in_window, judge_drop, 0.0)
                    + rng.normal(0, 0.05, n), 0, 1)
    records = [VerdictRecord(
        key=VerdictKey(f"s-{i}", "rag_qa", "v1", "judge-1"), status="ok", error_class=None,
        error=None, reason="r", scores={"faithfulness": float(judge[i])},
        raw_scores={"faithfulness": float(judge[i])}, raw_output="{}", attempts=1,
        latency_ms=5, prompt_tokens=None, completion_tokens=None,
        attributes={"app": "support-bot"}, sample_ts=moments[i], created_at=moments[i],
        sample=None) for i in range(n)]
    return records, {f"s-{i}": float(truth[i]) for i in range(n)}


def fill(database_url: str, *, rate: float, seed: int, people_drop: float,
         judge_drop: float, strata: tuple[Stratum, ...] = ()) -> int:
    """Store the traffic through a store that queues ``rate`` of it for review (``strata``
    at theirs), and label every queued item with the truth. Returns the labels given."""
    records, truth = traffic(seed=seed, people_drop=people_drop, judge_drop=judge_drop)
    worker = open_store(database_url, pool_size=1, review=ReviewSlice(
        {"rag_qa": MetricSlice(rate=rate, strata=strata)}))
    for start in range(0, len(records), 1000):
        worker.save(verdicts=records[start:start + 1000], owner="w")
    queue = ReviewQueue(worker)
    items = list(queue.iter_items(metric="rag_qa"))
    for item in items:
        value = truth[item.sample_id]
        queue.label(item_id=item.id, reviewer="ann", comment=None, source="import",
                    labels={"faithfulness": LabelValue(raw=value, value=value)}, now=AT,
                    require_lease=False)
    worker.close()
    return len(items)


@pytest.mark.parametrize(("rate", "people_drop", "judge_drop", "verdict"), [
    (0.08, 0.0, 0.15, JUDGE_BIAS_CHANGED),
    (0.08, 0.15, 0.0, CONFIRMED),
    (0.02, 0.15, 0.0, TOO_FEW_LABELS),
], ids=["judge-artefact", "real-drop", "too-few-labels"])
def test_a_firing_alert_says_whether_peoples_labels_confirm_the_drop(
        open_engine: Callable[..., AlertEngine], receiver: Receiver, database_url: str,
        tmp_path: Path, rate: float, people_drop: float, judge_drop: float,
        verdict: str, alert_store: SqlStore) -> None:
    engine = open_engine(RULE)
    labels = fill(database_url, rate=rate, seed=21, people_drop=people_drop,
                  judge_drop=judge_drop)
    assert labels > 0
    report = engine.check(at=AT)
    (row,) = report.rows
    assert row.state == "firing" and row.mean is not None and row.baseline_mean is not None
    assert row.baseline_mean - row.mean > 0.1  # the judge's drop, real or not

    (alert,) = receiver.alerts()
    annotations = alert["annotations"]
    assert annotations["judge_check"] == verdict
    line = annotations["judge_check_detail"]
    assert line.startswith(f"people's labels: {verdict}") and line in annotations["description"]
    if verdict == TOO_FEW_LABELS:
        assert "at least 50 each" in line and "corrected change" not in line
    else:
        assert "corrected change" in line and "judge bias change" in line
    assert "(shared" not in line  # own pools: the two periods share no label

    settings = Settings(database_url=database_url, alert_rules_file=tmp_path / "rules-0.yaml")
    shown = CliRunner().invoke(main, ["alerts", "show", "faithfulness_drop"],
                               env=settings.as_environment(), catch_exceptions=False)
    assert line in shown.output
    page = Served(build_ui_app(settings.model_copy(update={"data_dir": tmp_path}),
                               token=None))
    try:
        html = httpx.get(page.url + "/alerts/faithfulness_drop", timeout=30).text
    finally:
        page.stop()
    assert f'id="judge-check-verdict">{verdict}<' in html
    assert ('id="corrected-change">' in html) == (verdict != TOO_FEW_LABELS)

    # The next cycles keep the check of the firing notification without reading it again.
    later = engine.check(at=AT + timedelta(minutes=10))
    assert later.rows[0].state == "firing"
    view = load_alert_view(alert_store, engine.rules.rules[0], Segment())
    assert view.finding["judge_check"]["verdict"] == verdict


def test_a_corrected_drop_matches_the_corrected_estimates_of_its_periods(
        open_engine: Callable[..., AlertEngine], database_url: str,
        alert_store: SqlStore) -> None:
    """The check's corrected means are ``review estimate``'s for the same periods."""
    engine = open_engine(RULE)
    fill(database_url, rate=0.08, seed=22, people_drop=0.15, judge_drop=0.0)
    engine.check(at=AT)
    check = load_alert_view(alert_store, engine.rules.rules[0], Segment()).finding[
        "judge_check"]
    window, baseline = spans(engine.rules.rules[0], segment=Segment(), baseline_segment=None,
                             at=AT)
    assert baseline is not None
    store = open_store(database_url)
    try:
        for name, span in (("window", window), ("baseline", baseline)):
            found = estimate_score(
                EstimateReads(store), metric=load_registry().get("rag_qa"),
                score="faithfulness", segment={}, start=span.start, end=span.end,
                label_start=span.labels_from, min_labels=50, confidence=0.9)
            assert found.corrected is not None
            assert check[name]["corrected"]["value"] == pytest.approx(found.corrected.value)
            assert check[name]["labels"] == found.labels
    finally:
        store.close()
    change = check["corrected_change"]
    assert change["value"] == pytest.approx(
        check["window"]["corrected"]["value"] - check["baseline"]["corrected"]["value"])


def test_pools_reach_back_from_each_periods_end(tmp_path: Path) -> None:
    path = write_rules(tmp_path / "rules.yaml", RULE, {
        **RULE, "name": "pooled", "judge_check": {"label_window": "1d"}})
    own, pooled = load_rules(path, registry=load_registry()).rules
    window, baseline = spans(own, segment=Segment(), baseline_segment=None, at=AT)
    assert window == Span(Segment(), AT - timedelta(hours=2), AT, AT - timedelta(hours=2))
    assert baseline == Span(Segment(), AT - timedelta(hours=8), AT - timedelta(hours=2),
                            AT - timedelta(hours=8))
    window, baseline = spans(pooled, segment=Segment(), baseline_segment=None, at=AT)
    assert window.labels_from == AT - timedelta(days=1)
    assert baseline is not None and baseline.labels_from == AT - timedelta(hours=26)


def test_a_check_with_a_thin_heavy_stratum_says_it_has_too_few_labels(
        open_engine: Callable[..., AlertEngine], receiver: Receiver, database_url: str) -> None:
    """Low scores at 0.5 give each pool its 50 labels; the rest, at 0.005, a handful each
    weighing 200 verdicts: the estimator's per-stratum minimum holds for the check too."""
    engine = open_engine(RULE)
    labels = fill(database_url, rate=0.005, seed=22, people_drop=0.15, judge_drop=0.0,
                  strata=(Stratum(0.75, 0.5),))
    assert labels > 100
    engine.check(at=AT)
    (alert,) = receiver.alerts()
    assert alert["annotations"]["judge_check"] == TOO_FEW_LABELS
    line = alert["annotations"]["judge_check_detail"]
    assert "(lacking: window (" in line and "stratum 'rest' at rate 0.005 has " in line, line
    assert "of 30 labels" in line
