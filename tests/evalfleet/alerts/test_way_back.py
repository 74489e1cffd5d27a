"""Alerts that can end: a false alarm on a steady segment resolves.

The scenario: a segment whose true mean is 0.85 fires against a trailing baseline of
only 40 samples that happened to average 0.90 (a false alarm the false discovery rate
allows). With ``exclude_firing`` the baseline would keep only those 40 samples for as
long as the alert fires, so it never resolves. The cap on exclusion periods
(``exclude_firing_max``) and ``evalfleet alerts rebaseline`` are the ways back.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner

from evalfleet.alerts import AlertEngine
from evalfleet.cli import main
from evalfleet.core.settings import Settings
from tests.evalfleet.alerts import stream
from tests.evalfleet.alerts.conftest import BOTH_DATABASES
from tests.evalfleet.alerts.test_engine import MINUTE, T0, events, run

SEGMENT = {"app": "support-bot"}

#: Fires at once on a 0.05 drop; clears when the drop is under 0.02.
RULE: dict[str, Any] = {
    "name": "steady_segment", "segment_by": ["app"], "window": "10m", "interval": "1m",
    "min_samples": 30, "min_effect": 0.03, "mode": "baseline", "for": 1,
    "recovery": {"for": 2, "margin": 0.01},
}


def alternating(start: datetime, *, minutes: int, per_minute: int, low: float,
                high: float) -> list[stream.Point]:
    """Evenly spaced values alternating between ``low`` and ``high`` (mean in between)."""
    step = timedelta(minutes=1 / per_minute)
    return [stream.Point(start + i * step, low if i % 2 else high, dict(SEGMENT))
            for i in range(minutes * per_minute)]


def plant_false_alarm(engine: AlertEngine) -> None:
    """40 baseline samples averaging 0.90, then the segment's steady 0.85 from T0 on."""
    stream.write(engine.store.engine,
                 alternating(T0 - 60 * MINUTE, minutes=40, per_minute=1, low=0.85, high=0.95)
                 + alternating(T0, minutes=240, per_minute=6, low=0.80, high=0.90))


def segment_events(reports: list[Any]) -> list[tuple[datetime, str]]:
    return [(at, event) for at, segment, event in events(reports) if segment == "app=support-bot"]


@pytest.mark.parametrize("alert_database", BOTH_DATABASES, indirect=True)
def test_without_a_cap_the_false_alarm_never_ends(
    open_engine: Callable[..., AlertEngine],
) -> None:
    engine = open_engine({**RULE, "baseline": {"type": "trailing", "window": "2h",
                                               "exclude_firing_max": None}})
    plant_false_alarm(engine)
    seen = segment_events(run(engine, T0 + 10 * MINUTE, 150))
    assert seen == [(T0 + 10 * MINUTE, "firing")]


@pytest.mark.parametrize("alert_database", BOTH_DATABASES, indirect=True)
def test_the_exclusion_cap_lets_a_false_alarm_on_a_steady_segment_resolve(
    open_engine: Callable[..., AlertEngine],
) -> None:
    engine = open_engine({**RULE, "baseline": {"type": "trailing", "window": "2h",
                                               "exclude_firing_max": "30m"}})
    plant_false_alarm(engine)
    seen = segment_events(run(engine, T0 + 10 * MINUTE, 150))
    assert seen[0] == (T0 + 10 * MINUTE, "firing")
    assert [event for _, event in seen] == ["firing", "resolved"]
    # Back in the baseline once the samples after the cap reach it (window + 30 m).
    assert T0 + 40 * MINUTE < seen[1][0] < T0 + 150 * MINUTE


@pytest.mark.parametrize("alert_database", BOTH_DATABASES, indirect=True)
def test_rebaseline_from_the_cli_lets_it_resolve(
    open_engine: Callable[..., AlertEngine], alert_database: str, tmp_path: Any,
) -> None:
    rule = {**RULE, "baseline": {"type": "trailing", "window": "2h",
                                 "exclude_firing_max": None}}
    engine = open_engine(rule)
    plant_false_alarm(engine)
    assert segment_events(run(engine, T0 + 10 * MINUTE, 20)) == [
        (T0 + 10 * MINUTE, "firing")]
    rules_file = next(tmp_path.glob("rules-*.yaml"))
    env = Settings(database_url=alert_database,
                   alert_rules_file=rules_file).as_environment()
    out = CliRunner().invoke(main, ["alerts", "rebaseline", "steady_segment",
                                    "app=support-bot"], env=env, catch_exceptions=False)
    assert "2 firing period(s) back in the baseline" in out.output  # and (all)'s
    later = segment_events(run(engine, T0 + 30 * MINUTE, 120))
    assert [event for _, event in later] == ["resolved"]


@pytest.mark.parametrize("args,message", [
    (["nope"], "no rule 'nope'"),
    (["steady_segment", "app"], "expected key=value"),
])
def test_rebaseline_names_what_is_wrong(database_url: str, tmp_path: Any, args: list[str],
                                        message: str) -> None:
    from tests.evalfleet.alerts.conftest import write_rules

    path = write_rules(tmp_path / "r.yaml", RULE)
    env = Settings(database_url=database_url, alert_rules_file=path).as_environment()
    out = CliRunner().invoke(main, ["alerts", "rebaseline", *args], env=env)
    assert out.exit_code == 2 and message in out.output
