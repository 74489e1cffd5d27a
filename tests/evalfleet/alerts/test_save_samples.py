"""The worst samples of an alert become a versioned dataset in one step (the CLI form)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.evalfleet.alerts.test_show import fired  # noqa: F401
from tests.evalfleet.dataset.test_cli import dataset


@pytest.mark.parametrize("alert_database", ["postgres"], indirect=True)
def test_an_alerts_worst_samples_become_a_dataset_in_one_step(
        fired: Path, alert_database: str) -> None:  # noqa: F811
    made = dataset(alert_database, "create", "support-drop", "--alert",
                   "faithfulness_drop:app=support-bot", "--worst", "5", rules=fired)
    assert made.exit_code == 0, made.output
    assert "support-drop version 1: 5 item(s)" in made.output
    shown = dataset(alert_database, "show", "support-drop", rules=fired).output
    assert "alert faithfulness_drop app=support-bot worst 5 of 2026-11-21T" in shown
    assert shown.index("worst-1") < shown.index("worst-2")
    assert "\x1b" not in shown and "\u202e" not in shown
    again = dataset(alert_database, "add", "support-drop", "--alert", "faithfulness_drop",
                    "--worst", "5", rules=fired)
    assert again.exit_code == 0 and "nothing added" in again.output
    mixed = dataset(alert_database, "create", "x", "--alert", "faithfulness_drop", "--status",
                    "ok", rules=fired)
    assert mixed.exit_code == 2 and "alert: takes no other filter (--status)" in mixed.output
    bad = dataset(alert_database, "create", "x", "--alert", "no_such_rule", rules=fired)
    assert bad.exit_code == 2 and "alert: no rule 'no_such_rule'" in bad.output
