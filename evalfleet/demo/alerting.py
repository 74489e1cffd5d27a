"""The demo's alert cycle: replay the bundled traffic's hours, print what fired and why.

The bundled samples carry timestamps over six hours, and support-bot changed prompt
version half-way (v11 to v12, whose answers make claims their context never makes, so
the simulator's word-overlap faithfulness drops). The alert engine is run once per
rule interval over those hours, as ``evalfleet alerts check --at`` would have run it
live, on whatever store the demo used (the embedded SQLite file by default).
"""

from __future__ import annotations

import logging
import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path

import yaml

from evalfleet.core.durations import format_moment
from evalfleet.core.settings import Settings

#: The demo's rule, as written in ``rules.yaml``.
RULE_NAME = "support_faithfulness_drop"


@dataclass(frozen=True)
class Fired:
    """One segment that started firing during the replay."""

    at: datetime
    segment: str


@dataclass(frozen=True)
class Replay:
    """What the replay found."""

    fired: list[Fired]
    """Segments that started firing, in order."""
    shown: str | None
    """The segment printed with its evidence (None when nothing fired)."""


def demo_rules_file(settings: Settings, *, run_tag: str) -> Path:
    """The demo's rules, copied beside its data (so ``alerts show`` can be pointed at
    them); in a shared database the rule only sees this run's samples."""
    target = Path(settings.store.data_dir) / "demo-rules.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    source = resources.files("evalfleet.demo") / "rules.yaml"
    if not run_tag:
        with resources.as_file(source) as path:
            shutil.copyfile(path, target)
        return target
    document = yaml.safe_load(source.read_text(encoding="utf-8"))
    for rule in document["rules"]:
        rule["filters"] = {"demo_run": run_tag}
    target.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return target


def replay_alerts(settings: Settings, *, first: datetime, last: datetime,
                  echo: Callable[[str], None]) -> Replay:
    """Run one alert cycle per interval from ``first`` to just past ``last`` and print
    the alert that fired with its evidence.

    Args:
        settings: The demo's settings, ``alert_rules_file`` set to the demo's rules.
        first: The earliest sample time.
        last: The latest sample time.
        echo: Where to print.

    Returns:
        The segments that fired, and the one shown.
    """
    from evalfleet.alerts import open_alert_engine
    from evalfleet.alerts.ledger import load_states
    from evalfleet.alerts.terminal import most_telling, render_alert_view
    from evalfleet.alerts.view import load_alert_view

    engine = open_alert_engine(settings, deliver=False)
    # The engine logs each firing as a warning; here the demo prints them itself.
    engine_log = logging.getLogger("evalfleet.alerts.engine")
    level = engine_log.level
    engine_log.setLevel(logging.ERROR)
    try:
        rule = next(r for r in engine.rules.rules if r.name == RULE_NAME)
        fired = []
        cycles = 0
        for at in _cycle_times(first, last, interval=rule.spec.interval):
            report = engine.check(at=at)
            cycles += 1
            fired += [Fired(at, segment) for _, segment, event in report.events
                      if event == "firing"]
        echo(f"alert engine: {cycles} cycles of rule {RULE_NAME}, one per "
             f"{_minutes(rule.spec.interval)} from {format_moment(first)} to {format_moment(last)}")
        if not fired:
            echo("no alert fired")
            return Replay(fired, None)
        for item in fired:
            echo(f"FIRING at {format_moment(item.at)}: {RULE_NAME} {item.segment}")
        with engine.store.connect() as conn:
            segment = most_telling(load_states(conn, RULE_NAME))
        echo("")
        echo(render_alert_view(load_alert_view(engine.store, rule, segment, worst=3)))
        return Replay(fired, str(segment))
    finally:
        engine_log.setLevel(level)
        engine.close()


def _cycle_times(first: datetime, last: datetime, *, interval: timedelta) -> list[datetime]:
    step_s = interval.total_seconds()
    start_s = math.ceil(first.timestamp() / step_s) * step_s
    end_s = last.timestamp() + step_s
    count = int((end_s - start_s) // step_s) + 1
    return [datetime.fromtimestamp(start_s + i * step_s, UTC) for i in range(count)]


def _minutes(delta: timedelta) -> str:
    return f"{int(delta.total_seconds() // 60)} min"
