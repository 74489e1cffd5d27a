"""The Prometheus rules, the scrape config and the dashboard's queries pass promtool.

``promtool`` (Debian's ``prometheus`` package, installed by .ci/run) is required: a
missing tool fails these tests.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.ops.dashboard import ROOT, dashboard_expressions
from tests.tools import require_tool

PROMETHEUS = ROOT / "ops" / "prometheus"


def promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    tool = require_tool("promtool")
    return subprocess.run([tool, *map(str, args)], capture_output=True, text=True,
                          timeout=120, check=False)


def rule_names() -> list[str]:
    rules = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    return [rule["alert"] for group in rules["groups"] for rule in group["rules"]]


def test_rules_pass_promtool_check() -> None:
    result = promtool("check", "rules", PROMETHEUS / "alerts.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rule_names())} rules found" in result.stdout


def test_rule_unit_tests_pass() -> None:
    result = promtool("test", "rules", PROMETHEUS / "alerts.test.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_rule_fires_on_its_series_and_stays_quiet_when_healthy() -> None:
    cases = yaml.safe_load((PROMETHEUS / "alerts.test.yml").read_text())["tests"]
    fires: set[str] = set()
    quiet: set[str] = set()
    for case in cases:
        for check in case["alert_rule_test"]:
            if check["exp_alerts"]:
                fires.add(check["alertname"])
            elif case["name"].startswith("healthy"):
                quiet.add(check["alertname"])
    assert fires == set(rule_names())
    assert quiet == set(rule_names())


def test_a_wrong_expectation_fails_the_unit_tests(tmp_path: Path) -> None:
    text = (PROMETHEUS / "alerts.test.yml").read_text().replace(
        "holds 1500 messages", "holds 9 messages")
    broken = tmp_path / "alerts.test.yml"
    broken.write_text(text.replace("  - alerts.yml", f"  - {PROMETHEUS / 'alerts.yml'}"))
    result = promtool("test", "rules", broken)
    assert result.returncode != 0
    assert "holds 9 messages" in result.stdout + result.stderr


def test_scrape_config_passes_promtool() -> None:
    result = promtool("check", "config", PROMETHEUS / "scrape.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def write_as_rules(expressions: list[str], path: Path) -> Path:
    """Each expression as a recording rule, so ``promtool check rules`` parses it."""
    rules = [{"record": f"dashboard:expr_{n}", "expr": expr}
             for n, expr in enumerate(expressions)]
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    return path


def test_dashboard_queries_parse(tmp_path: Path) -> None:
    expressions = dashboard_expressions()
    assert len(expressions) >= 15
    result = promtool("check", "rules", write_as_rules(expressions, tmp_path / "d.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(expressions)} rules found" in result.stdout


def test_a_broken_query_is_caught(tmp_path: Path) -> None:
    result = promtool("check", "rules", write_as_rules(
        ["sum by (metric (rate(evalfleet_verdicts_total[5m]))"], tmp_path / "bad.yml"))
    assert result.returncode != 0
