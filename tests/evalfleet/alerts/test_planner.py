"""``alerts plan``: what a rule sees at a segment's traffic, and what it would take."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine

from evalfleet.alerts.planner import plan_segment, rule_false_alarms_per_month
from evalfleet.alerts.statistic import Summary
from evalfleet.core.settings import Settings
from tests.evalfleet.alerts import stream
from tests.evalfleet.alerts.conftest import write_rules
from tests.evalfleet.alerts.test_cli import cli
from tests.evalfleet.alerts.test_detector import make_rule
from tests.evalfleet.alerts.test_engine import T0

DAY = timedelta(days=1)


def day_at(per_minute: float) -> Summary:
    """A day of a score around 0.8 (variance 0.04) at ``per_minute`` samples a minute."""
    n = round(per_minute * 1440)
    return Summary(n=n, total=0.8 * n, total_sq=(0.64 + 0.04) * n)


def plan(per_minute: float, **fields: Any) -> Any:
    rule = make_rule(test="sequential", mode="baseline", max_segments=300, **fields)
    return plan_segment(rule, day_at(per_minute), span=DAY, drop=0.05, within=timedelta(hours=1))


def test_more_traffic_sees_smaller_drops_sooner() -> None:
    slow, fast = plan(1), plan(100)
    assert slow.samples_per_minute == pytest.approx(1)
    assert fast.smallest_drop_hour is not None and fast.smallest_drop_day is not None
    assert fast.smallest_drop_day < fast.smallest_drop_hour < 0.05
    assert slow.smallest_drop_hour is None or slow.smallest_drop_hour > fast.smallest_drop_hour
    assert fast.needed_per_minute is not None and fast.needed_per_minute < 100
    assert slow.needed_per_minute is not None and slow.needed_per_minute > 1


def test_false_alarms_follow_the_run_length() -> None:
    monthly, yearly = plan(10, run_length="30d"), plan(10, run_length="365d")
    assert yearly.false_alarms_per_month < monthly.false_alarms_per_month
    assert monthly.false_alarms_per_month == pytest.approx(1 / 300)  # one segment of 300
    rule = make_rule(run_length="10d")
    assert rule_false_alarms_per_month(rule) == pytest.approx(3)


def test_no_traffic_sees_nothing() -> None:
    empty = plan_segment(make_rule(), Summary(n=0), span=DAY, drop=0.05, within=DAY)
    assert empty.smallest_drop_hour is None and empty.smallest_drop_day is None


def test_the_command_prints_each_segment(database_url: str, tmp_path: Path) -> None:
    rules = write_rules(tmp_path / "rules.yaml", {"name": "faithfulness_drop",
                                                  "segment_by": ["app"], "test": "sequential"})
    settings = Settings(database_url=database_url, alert_rules_file=rules)
    engine = create_engine(database_url)
    stream.write(engine, stream.steady(start=T0 - DAY, minutes=1440, per_minute=2, mean=0.8,
                                       seed=1, attributes={"app": "support-bot"}))
    engine.dispose()
    result = cli(settings, "alerts", "plan", "faithfulness_drop", "--at", T0.isoformat(),
                 "--drop", "0.1", "--within", "2h")
    assert result.exit_code == 0, result.output
    assert "false alarms a month" in result.output
    lines = [line.split() for line in result.output.splitlines()]
    row = next(line for line in lines if line and line[0] == "app=support-bot")
    assert float(row[1]) == pytest.approx(2, rel=0.01)
    bad = cli(settings, "alerts", "plan", "faithfulness_drop", "--within", "soon")
    assert bad.exit_code == 2 and "soon" in bad.output
    unknown = cli(settings, "alerts", "plan", "nope")
    assert unknown.exit_code == 2 and "no rule 'nope'" in unknown.output
