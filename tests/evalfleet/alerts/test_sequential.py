"""Sequential rules through the engine, the store and a real HTTP receiver: a drop fires
with its evidence, steady traffic stays quiet, the detectors' state survives a restart and
starts again once an alert resolves."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from evalfleet.alerts import AlertEngine, CycleReport
from evalfleet.alerts.ledger import load_states
from evalfleet.alerts.rule import AlertRule, load_rules
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.sequential import parse_stored
from evalfleet.alerts.terminal import render_alert_view
from evalfleet.alerts.view import load_alert_view
from evalfleet.core.errors import InvalidAlertRule
from evalfleet.core.metric import load_registry
from evalfleet.store import SqlStore
from tests.evalfleet.alerts import stream
from tests.evalfleet.alerts.conftest import BOTH_DATABASES, write_rules
from tests.evalfleet.alerts.receiver import Receiver

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
APP = {"app": "support-bot"}

RULE: dict[str, Any] = {
    "name": "faithfulness_drop", "test": "sequential", "segment_by": ["app"],
    "window": "10m", "interval": "1m", "min_samples": 30, "min_effect": 0.05,
    "mode": "baseline", "baseline": {"type": "trailing", "window": "2h", "gap": "10m"},
    "for": 1, "recovery": {"for": 3, "margin": 0.02}, "max_segments": 10,
}


def run(engine: AlertEngine, start: datetime, minutes: int) -> list[CycleReport]:
    return [engine.check(at=start + i * MINUTE) for i in range(minutes)]


def fired(reports: list[CycleReport], event: str = "firing") -> list[tuple[datetime, str]]:
    return [(report.at, segment) for report in reports
            for _, segment, name in report.events if name == event]


def steady(start: datetime, minutes: float, mean: float, seed: int) -> list[stream.Point]:
    return stream.steady(start=start, minutes=minutes, per_minute=20, mean=mean, seed=seed,
                         attributes=APP)


def test_an_app_rule_is_sequential_unless_it_says_fixed() -> None:
    common = {"name": "r", "metric": "rag_qa", "score": "faithfulness"}
    assert AlertRule.model_validate(common).sequential
    assert not AlertRule.model_validate({**common, "test": "fixed"}).sequential
    assert not AlertRule.model_validate({**common, "kind": "judge_drift"}).sequential
    with pytest.raises(ValueError, match="test is 'fixed'"):
        AlertRule.model_validate({**common, "kind": "judge_drift", "test": "sequential"})


@pytest.mark.parametrize("alert_database", BOTH_DATABASES, indirect=True)
def test_a_drop_fires_with_its_evidence_and_steady_traffic_stays_quiet(
    open_engine: Callable[..., AlertEngine], receiver: Receiver, alert_store: SqlStore,
) -> None:
    engine = open_engine(RULE)
    stream.write(engine.store.engine, steady(T0 - timedelta(hours=3), 180, 0.85, 1)
                 + steady(T0, 30, 0.70, 2))
    quiet = run(engine, T0 - 60 * MINUTE, 60)
    assert fired(quiet) == []
    reports = run(engine, T0, 30)
    first = min(at for at, _ in fired(reports))
    assert T0 < first <= T0 + 20 * MINUTE
    alert = next(a for a in receiver.alerts() if a["labels"].get("app") == "support-bot")
    notes = alert["annotations"]
    assert notes["test"] == "sequential"
    assert float(notes["baseline_e_value"]) >= float(notes["baseline_alarm_level"])
    low, high = (float(v) for v in notes["baseline_drop_interval"].strip("[]").split(","))
    assert low < 0.15 < high
    started = datetime.fromisoformat(notes["baseline_change_started_at"])
    assert abs(started - T0) <= 5 * MINUTE
    assert "e-detector (baseline)" in notes["description"]
    rule = engine.rules.rules[0]
    shown = render_alert_view(load_alert_view(alert_store, rule, Segment.of(APP)))
    assert "e-detector (baseline): e-value" in shown and "sequential test" in shown


def test_detector_state_survives_a_restart_and_restarts_after_resolving(
    open_engine: Callable[..., AlertEngine],
) -> None:
    engine = open_engine(RULE)
    stream.write(engine.store.engine, steady(T0 - timedelta(hours=3), 180, 0.85, 3)
                 + steady(T0, 20, 0.65, 4) + steady(T0 + 20 * MINUTE, 200, 0.85, 5))
    run(engine, T0 - 10 * MINUTE, 25)
    with engine.store.engine.connect() as conn:
        before = {s.segment: s for s in load_states(conn, RULE["name"])}
    (segment,) = [s for s in before if s.labels]
    assert before[segment].state.state == "firing"
    updates = parse_stored(before[segment].detector)["baseline"].updates
    again = open_engine(RULE)  # a new evaluator process: the state is read back
    reports = run(again, T0 + 15 * MINUTE, 60)
    assert fired(reports, "resolved")
    with again.store.engine.connect() as conn:
        after = {s.segment: s for s in load_states(conn, RULE["name"])}
    detector = parse_stored(after[segment].detector)["baseline"]
    assert detector.updates == updates + 60
    assert detector.log_statistic < 1.0  # started again when it resolved


def test_a_damaged_detector_state_starts_again(
    open_engine: Callable[..., AlertEngine],
) -> None:
    engine = open_engine(RULE)
    stream.write(engine.store.engine, steady(T0 - timedelta(hours=3), 180, 0.85, 6))
    run(engine, T0 - 3 * MINUTE, 2)
    with engine.store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alert_states SET detector = '{\"baseline\": \"x\"}'")
    (report,) = run(engine, T0, 1)
    assert {row.state for row in report.rows} == {"ok"}
    with engine.store.engine.connect() as conn:
        states = load_states(conn, RULE["name"])
    assert all(parse_stored(s.detector)["baseline"].updates == 1 for s in states)


@pytest.mark.parametrize("fields,field,words", [
    ({"test": "bayesian"}, "test", "sequential"),
    ({"run_length": "30s"}, None, "'run_length' must be at least one 'interval'"),
    ({"run_length": "soon"}, "run_length", "soon"),
])
def test_a_bad_sequential_setting_is_named(tmp_path: Path, fields: dict[str, Any],
                                           field: str | None, words: str) -> None:
    path = write_rules(tmp_path / "rules.yaml", {**RULE, **fields})
    with pytest.raises(InvalidAlertRule) as caught:
        load_rules(path, registry=load_registry())
    assert words in str(caught.value)
    if field is not None:
        assert field in str(caught.value)
