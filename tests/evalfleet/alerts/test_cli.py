"""``evalfleet alerts check --at`` and ``evalfleet alerts list`` against real Postgres."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from sqlalchemy import create_engine

from evalfleet.cli import main
from evalfleet.core.settings import Settings
from tests.evalfleet.alerts import stream
from tests.evalfleet.alerts.conftest import write_rules
from tests.evalfleet.alerts.receiver import Receiver
from tests.evalfleet.alerts.test_engine import DROP_RULE, MINUTE, T0, history


def cli(settings: Settings, *args: str) -> Any:
    return CliRunner().invoke(main, list(args), env=settings.as_environment(),
                              catch_exceptions=False)


def test_check_prints_a_table_notifies_and_list_shows_states(
    database_url: str, receiver: Receiver, tmp_path: Path,
) -> None:
    rules = write_rules(tmp_path / "rules.yaml", {**DROP_RULE, "for": 1})
    settings = Settings(database_url=database_url, alert_rules_file=rules,
                        alertmanager_url=receiver.url)
    engine = create_engine(database_url)
    drop = stream.steady(start=T0, minutes=10, per_minute=20, mean=0.6, seed=3,
                         attributes={"app": "support-bot"})
    stream.write(engine, history(T0) + drop)
    engine.dispose()
    before = cli(settings, "alerts", "check", "--at", (T0 - MINUTE).isoformat())
    assert before.exit_code == 0, before.output
    assert ["faithfulness_drop", "app=support-bot", "new", "ok"] in [
        line.split()[:4] for line in before.output.splitlines()]
    after = cli(settings, "alerts", "check", "--at", (T0 + 10 * MINUTE).isoformat())
    assert after.exit_code == 1  # something is firing
    assert "firing" in after.output and "welch_t" in after.output
    assert "notifications delivered: alertmanager 2" in after.output
    again = cli(settings, "alerts", "check", "--at", (T0 + 10 * MINUTE).isoformat())
    assert "already evaluated in this cycle" in again.output
    listed = cli(settings, "alerts", "list")
    assert listed.exit_code == 0
    lines = [line for line in listed.output.splitlines() if "firing" in line]
    assert len(lines) == 2 and any("app=support-bot" in line for line in lines)
    assert len(receiver.alerts()) == 2


def test_check_reports_bad_rules_and_times(database_url: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - {name: x, metric: rag_qa, score: nope}\n")
    settings = Settings(database_url=database_url, alert_rules_file=bad)
    result = CliRunner().invoke(main, ["alerts", "check"], env=settings.as_environment())
    assert result.exit_code == 2 and "rule 'x', field 'score'" in result.output
    ok = Settings(database_url=database_url)
    result = CliRunner().invoke(main, ["alerts", "check", "--at", "yesterday"],
                                env=ok.as_environment())
    assert result.exit_code == 2 and "not an ISO 8601 time" in result.output


def test_default_rules_evaluate_on_an_empty_store(database_url: str) -> None:
    settings = Settings(database_url=database_url)
    result = cli(settings, "alerts", "check", "--at", (T0 + timedelta(days=1)).isoformat())
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    drops = ("rag_qa_faithfulness_drop", "context_precision_drop", "bbh_accuracy_drop",
             "agent_task_completion_drop", "agent_tool_use_drop", "rec_faithfulness_drop",
             "conversation_goal_completion_drop", "conversation_faithfulness_drop",
             "user_frustration_rise")
    drifts = ("rag_qa_judge_drift", "context_precision_judge_drift", "bbh_judge_drift",
              "rec_faithfulness_judge_drift", "agent_task_completion_judge_drift",
              "agent_tool_use_judge_drift", "conversation_goal_completion_judge_drift",
              "conversation_faithfulness_judge_drift", "user_frustration_judge_drift")
    count = len(drops) + len(drifts)
    rows = [line.split() for line in lines[2:2 + count]]
    assert lines[2 + count:] == [f"{rule}: no baseline: no calibration run of this metric "
                                 "(run `evalfleet calibrate`)" for rule in drifts]
    assert sorted(row[:4] for row in rows) == sorted(
        [[rule, "(all)", "new", "no_data"] for rule in drops]
        + [[rule, "(all)", "new", "insufficient_data"] for rule in drifts])
