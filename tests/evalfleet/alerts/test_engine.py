"""The alert engine on synthetic verdict streams in real Postgres, delivering over real HTTP.

Streams are written straight into the verdict tables with sample times around
``T0``; each test then runs evaluation cycles at chosen times (``check(at=...)``),
as ``evalfleet alerts check --at`` does, so nothing waits in real time.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select

from evalfleet.alerts import AlertEngine, CycleReport
from evalfleet.store.schema import alert_notifications
from tests.evalfleet.alerts import stream
from tests.evalfleet.alerts.conftest import BOTH_DATABASES
from tests.evalfleet.alerts.receiver import Receiver

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)

#: A faithfulness rule with short windows, so streams stay small.
DROP_RULE: dict[str, Any] = {
    "name": "faithfulness_drop", "segment_by": ["app"], "window": "10m", "interval": "1m",
    "min_samples": 30, "min_effect": 0.05, "mode": "baseline",
    "baseline": {"type": "trailing", "window": "2h", "gap": "10m"},
    "for": 3, "recovery": {"for": 3, "margin": 0.02},
}


def run(engine: AlertEngine, start: datetime, minutes: int) -> list[CycleReport]:
    """One cycle per minute from ``start``."""
    return [engine.check(at=start + i * MINUTE) for i in range(minutes)]


def events(reports: list[CycleReport]) -> list[tuple[datetime, str, str]]:
    return [(report.at, segment, event) for report in reports
            for _, segment, event in report.events]


def history(start: datetime, *, per_minute: float = 20, mean: float = 0.85, seed: int = 1,
            attributes: dict[str, str] | None = None, minutes: float = 180) -> list[stream.Point]:
    """``minutes`` of steady traffic ending at ``start``."""
    return stream.steady(start=start - timedelta(minutes=minutes), minutes=minutes,
                         per_minute=per_minute, mean=mean, seed=seed,
                         attributes=attributes or {"app": "support-bot"})


@pytest.mark.parametrize("alert_database", BOTH_DATABASES, indirect=True)
def test_a_drop_from_085_to_070_fires_within_ten_minutes_once(
    open_engine: Callable[..., AlertEngine], receiver: Receiver,
) -> None:
    engine = open_engine(DROP_RULE)
    drop = stream.steady(start=T0, minutes=20, per_minute=20, mean=0.70, seed=2,
                         attributes={"app": "support-bot"})
    # Written as a backfill: stored hours later, windows still follow the sample times.
    stream.write(engine.store.engine, history(T0) + drop, created_at=T0 + timedelta(hours=5))
    reports = run(engine, T0 - 5 * MINUTE, 16)
    fired = [(at, segment) for at, segment, event in events(reports) if event == "firing"]
    assert fired, "the drop never fired"
    first_at = min(at for at, _ in fired)
    assert T0 < first_at <= T0 + 10 * MINUTE
    assert {segment for _, segment in fired} == {"(all)", "app=support-bot"}
    alerts = receiver.alerts()
    assert len(alerts) == 2  # one per segment, each once
    assert {a["labels"].get("app") for a in alerts} == {None, "support-bot"}
    firing = next(a for a in alerts if a["labels"].get("app") == "support-bot")
    assert firing["labels"]["alertname"] == "faithfulness_drop"
    assert float(firing["annotations"]["window_mean"]) < 0.8
    assert 0.84 < float(firing["annotations"]["baseline_mean"]) < 0.86
    assert firing["annotations"]["baseline_test"] == "welch_t"
    assert all(not any(c.isdigit() for c in value) for key, value in firing["labels"].items()
               if key not in ("app",))


def test_noise_of_a_few_hundredths_over_fifty_verdicts_does_not_fire(
    open_engine: Callable[..., AlertEngine], receiver: Receiver,
) -> None:
    engine = open_engine(DROP_RULE)
    wobble = stream.steady(start=T0, minutes=30, per_minute=5, seed=4,
                           mean=lambda ts: 0.85 - 0.03 * math.sin(ts.minute / 3),
                           attributes={"app": "support-bot"})
    stream.write(engine.store.engine, history(T0, per_minute=5, seed=3) + wobble)
    reports = run(engine, T0 + 10 * MINUTE, 20)
    assert events(reports) == []
    assert receiver.requests == []
    assert all(row.n == 50 for report in reports for row in report.rows)


def test_low_volume_segments_have_insufficient_data_while_the_parent_is_evaluated(
    open_engine: Callable[..., AlertEngine],
) -> None:
    engine = open_engine(DROP_RULE)
    points = history(T0, attributes={"app": "support-bot"}) + history(
        T0, per_minute=0.5, seed=5, attributes={"app": "tiny"})
    stream.write(engine.store.engine, points)
    (report,) = run(engine, T0, 1)
    states = {row.segment: row for row in report.rows}
    assert states["app=tiny"].state == "insufficient_data" and states["app=tiny"].n == 5
    assert states["(all)"].state == "ok" and states["(all)"].test == "welch_t"
    assert states["app=support-bot"].state == "ok"


def test_hundreds_of_null_segments_stay_quiet_and_one_real_drop_among_them_fires(
    open_engine: Callable[..., AlertEngine], receiver: Receiver,
) -> None:
    rule = {**DROP_RULE, "segment_by": ["route"], "min_samples": 20, "for": 1,
            "baseline": {"type": "trailing", "window": "1h", "gap": "0s"}}
    engine = open_engine(rule)
    points = []
    for route in range(200):
        means = {"route": f"/r{route}"}
        points += stream.steady(start=T0 - timedelta(minutes=70), minutes=80, per_minute=2,
                                mean=0.85, seed=100 + route, attributes=means)
    points += stream.steady(start=T0 - timedelta(minutes=70), minutes=70, per_minute=2,
                            mean=0.85, seed=7, attributes={"route": "/broken"})
    points += stream.steady(start=T0, minutes=10, per_minute=2, mean=0.65, seed=8,
                            attributes={"route": "/broken"})
    stream.write(engine.store.engine, points)
    reports = run(engine, T0 + 10 * MINUTE, 3)
    assert sum(len(report.rows) for report in reports) == 3 * 202
    fired = {segment for _, segment, event in events(reports) if event == "firing"}
    assert "route=/broken" in fired
    assert len(fired - {"route=/broken"}) <= 1  # 600 null tests: almost no false alerts


def test_a_mean_flapping_at_the_threshold_notifies_at_most_once(
    open_engine: Callable[..., AlertEngine], receiver: Receiver,
) -> None:
    rule = {**DROP_RULE, "mode": "threshold", "threshold": 0.70, "for": 2}
    engine = open_engine(rule)
    flapping = stream.steady(
        start=T0 - 10 * MINUTE, minutes=50, per_minute=20, seed=9,
        mean=lambda ts: 0.70 + (0.015 if (ts.minute // 2) % 2 else -0.015),
        attributes={"app": "support-bot"})
    stream.write(engine.store.engine, flapping)
    reports = run(engine, T0, 40)
    per_segment = Counter(segment for _, segment, _event in events(reports))
    assert all(count <= 1 for count in per_segment.values()), per_segment
    assert len(receiver.alerts()) <= 2  # at most once per segment (whole and app)


def test_recovery_sends_exactly_one_resolved(
    open_engine: Callable[..., AlertEngine], receiver: Receiver,
) -> None:
    engine = open_engine({**DROP_RULE, "segment_by": []})
    drop = stream.steady(start=T0, minutes=15, per_minute=20, mean=0.70, seed=10)
    back = stream.steady(start=T0 + 15 * MINUTE, minutes=30, per_minute=20, mean=0.85, seed=11)
    stream.write(engine.store.engine, history(T0, attributes={}) + drop + back)
    reports = run(engine, T0, 45)
    notified = [(event, at) for at, _, event in events(reports)]
    assert [event for event, _ in notified] == ["firing", "resolved"]
    resolved_at = notified[1][1]
    firing_alert, resolved_alert = receiver.alerts()
    assert firing_alert["labels"] == resolved_alert["labels"]
    assert resolved_alert["endsAt"] == resolved_at.isoformat().replace("+00:00", "Z")
    assert firing_alert["startsAt"] == resolved_alert["startsAt"]
    # The incident itself stayed out of the baseline: it resolved against 0.85, not lower.
    last = reports[-1].rows[0]
    assert last.state == "ok" and last.baseline_mean is not None and last.baseline_mean > 0.84


def test_two_evaluators_at_once_send_one_notification(
    open_engine: Callable[..., AlertEngine], receiver: Receiver,
) -> None:
    first, second = open_engine(DROP_RULE), open_engine(DROP_RULE)
    drop = stream.steady(start=T0, minutes=15, per_minute=20, mean=0.70, seed=12,
                         attributes={"app": "support-bot"})
    stream.write(first.store.engine, history(T0) + drop)
    for minute in range(12):
        barrier = threading.Barrier(2)
        at = T0 + minute * MINUTE

        def check(engine: AlertEngine, at: datetime = at,
                  barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            engine.check(at=at)

        threads = [threading.Thread(target=check, args=(e,)) for e in (first, second)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    alerts = receiver.alerts()
    assert len(alerts) == 2  # whole and app=support-bot, once each
    keys = [r.headers["idempotency-key"] for r in receiver.accepted]
    assert len(set(keys)) == len(keys)
    with first.store.engine.connect() as conn:
        rows = conn.execute(select(alert_notifications.c.delivered_at)).all()
    assert len(rows) == 2 and all(row.delivered_at is not None for row in rows)


def test_rising_scores_never_fire_a_decrease_rule(
    open_engine: Callable[..., AlertEngine], receiver: Receiver,
) -> None:
    engine = open_engine({**DROP_RULE, "mode": "both", "threshold": 0.8, "for": 1})
    rise = stream.steady(start=T0, minutes=30, per_minute=20, mean=0.97, sd=0.03, seed=13,
                         attributes={"app": "support-bot"})
    stream.write(engine.store.engine, history(T0, mean=0.82) + rise)
    reports = run(engine, T0, 30)
    assert events(reports) == []
    assert receiver.requests == []
    effects = [row.effect for report in reports for row in report.rows if row.effect is not None]
    assert min(effects) < -0.1  # it did see the change, in the good direction


def test_binary_score_drop_against_a_threshold_uses_the_wilson_bound(
    open_engine: Callable[..., AlertEngine], receiver: Receiver,
) -> None:
    rule = {**DROP_RULE, "name": "bbh_accuracy", "metric": "bbh_match", "score": "correct",
            "segment_by": [], "mode": "threshold", "threshold": 0.7, "for": 1}
    engine = open_engine(rule)
    points = stream.steady(start=T0 - 10 * MINUTE, minutes=10, per_minute=10, mean=0.5,
                           seed=14, kind="binary")
    stream.write(engine.store.engine, points, metric="bbh_match", score="correct")
    (report,) = run(engine, T0, 1)
    (row,) = report.rows
    assert row.state == "firing" and row.test == "wilson_score"
    (alert,) = receiver.alerts()
    low, high = (float(x) for x in alert["annotations"]["threshold_wilson_interval"]
                 .strip("[]").split(","))
    assert low < 0.5 < high < 0.7
    assert float(alert["annotations"]["threshold_bound"]) < 0.7


def test_a_new_prompt_version_is_compared_with_the_one_it_replaced(
    open_engine: Callable[..., AlertEngine], receiver: Receiver,
) -> None:
    rule = {**DROP_RULE, "name": "rec_faithfulness", "metric": "rec_faithfulness",
            "segment_by": [], "for": 1,
            "baseline": {"type": "pinned", "key": "prompt_version", "value": "previous",
                         "window": "1d"}}
    engine = open_engine(rule)
    old = stream.steady(start=T0 - timedelta(hours=3), minutes=170, per_minute=2, mean=0.75,
                        seed=15, kind="ordinal", attributes={"prompt_version": "v1"})
    new = stream.steady(start=T0 - 10 * MINUTE, minutes=10, per_minute=6, mean=0.45, seed=16,
                        kind="ordinal", attributes={"prompt_version": "v2"})
    stream.write(engine.store.engine, old + new, metric="rec_faithfulness")
    (report,) = run(engine, T0, 1)
    rows = {row.segment: row for row in report.rows}
    assert rows["prompt_version=v2"].state == "firing"
    assert rows["prompt_version=v2"].test == "mann_whitney_u"
    assert set(rows) == {"(all)", "prompt_version=v2"}  # v1 has no samples in the window
    (alert,) = receiver.alerts()
    assert alert["annotations"]["baseline_segment"] == "prompt_version=v1"
