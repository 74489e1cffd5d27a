"""``evalfleet alerts show``: history, window against baseline, worst samples, all escaped."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from evalfleet.alerts import AlertEngine
from evalfleet.cli import main
from evalfleet.core.settings import Settings
from tests.evalfleet.alerts import stream
from tests.evalfleet.alerts.conftest import BOTH_DATABASES
from tests.evalfleet.alerts.notifier.test_evidence import plant_worst
from tests.evalfleet.alerts.test_engine import DROP_RULE, MINUTE, T0, history, run


def show(url: str, rules: Path, *args: str) -> Result:
    env = Settings(database_url=url, alert_rules_file=rules).as_environment()
    return CliRunner().invoke(main, ["alerts", "show", *args], env=env)


@pytest.fixture
def fired(open_engine: Callable[..., AlertEngine], alert_database: str,
          tmp_path: Path) -> Path:
    """A rule that fired for app=support-bot, with hostile worst samples; its rules file."""
    engine = open_engine(DROP_RULE)
    drop = stream.steady(start=T0, minutes=20, per_minute=20, mean=0.70, seed=2,
                         attributes={"app": "support-bot"})
    stream.write(engine.store.engine, history(T0) + drop)
    plant_worst(alert_database)
    run(engine, T0 - 5 * MINUTE, 16)
    return next(tmp_path.glob("rules-*.yaml"))


@pytest.mark.parametrize("alert_database", BOTH_DATABASES, indirect=True)
def test_show_tells_the_story_of_a_firing_segment(fired: Path, alert_database: str) -> None:
    result = show(alert_database, fired, "faithfulness_drop", "app=support-bot")
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.startswith("faithfulness_drop  app=support-bot\n")
    assert "state: firing since 2026-11-21T12:0" in out
    window = next(line for line in out.splitlines() if line.startswith("window "))
    baseline = next(line for line in out.splitlines() if line.startswith("baseline "))
    assert float(window.split()[1]) < 0.75 < 0.84 < float(baseline.split()[1])
    assert "█" in window and "n=" in window
    assert "baseline test welch_t: effect" in out
    assert "pending -> firing" in out and "notified: firing" in out
    assert "trend from" in out and "^ current window" in out
    worst = out.split("worst samples of the window", 1)[1]
    assert "1. 0.00  worst-1" in worst and "2. 0.01  worst-2" in worst
    assert "judge:    case 1: <!channel>" in worst and "answer:" in worst
    # A conversation says which, how long, and its last question; a provisional version
    # is no evidence until final.
    assert ("session:  conversation conv-7, 2 turn(s) (closed by final_wait); last question: "
            "And tomorrow? <!channel>") in worst
    assert "provisional-0" not in out
    assert 'failed:   step 2 of 2: tool call weather {"city": "Olso"} -> no such city <!channel>' \
        in worst
    # What a faithfulness alert is about: the context the answer was given.
    assert "context:  [1] CHUNK-1-1 <script>alert(1)</script> <!channel>" in worst
    assert "[5] CHUNK-2-5" in worst and "CHUNK-2-6" not in worst and "(2 more chunk(s))" in worst
    # Sample and judge text cannot drive the terminal.
    assert "\x1b" not in out and "\u202e" not in out and "\r" not in out
    assert max(len(line) for line in out.splitlines()) < 600


@pytest.mark.parametrize("alert_database", ["postgres"], indirect=True)
def test_show_without_a_segment_picks_the_most_specific_firing_one(
    fired: Path, alert_database: str,
) -> None:
    result = show(alert_database, fired, "faithfulness_drop")
    assert result.output.startswith("faithfulness_drop  app=support-bot\n")
    whole = show(alert_database, fired, "faithfulness_drop", "(all)")
    assert whole.output.startswith("faithfulness_drop  (all)\n")


@pytest.mark.parametrize("alert_database", ["postgres"], indirect=True)
@pytest.mark.parametrize("args,message", [
    (["nope"], "no rule 'nope'"),
    (["faithfulness_drop", "route=/x"], "is not a level of this rule (levels: app)"),
    (["faithfulness_drop", "app"], "expected key=value"),
])
def test_show_names_what_is_wrong(fired: Path, alert_database: str, args: list[str],
                                  message: str) -> None:
    result = show(alert_database, fired, *args)
    assert result.exit_code == 2 and message in result.output


@pytest.mark.parametrize("alert_database", ["postgres"], indirect=True)
def test_show_of_a_segment_never_evaluated(open_engine: Callable[..., AlertEngine],
                                           alert_database: str, tmp_path: Path) -> None:
    open_engine(DROP_RULE)
    result = show(alert_database, next(tmp_path.glob("rules-*.yaml")), "faithfulness_drop",
                  "app=nobody")
    assert result.exit_code == 0, result.output
    assert "state: never evaluated" in result.output
    assert "(no scored samples in the window)" in result.output
