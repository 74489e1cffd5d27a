"""The commands agree with each other: --version, --json where people read tables, one
port range, and no empty database made behind the user's back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.evalfleet.cli.test_boundary import assert_one_line, run


def test_version() -> None:
    result = run({}, "--version")
    assert result.exit_code == 0
    assert result.stdout.startswith("evalfleet, version ")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    env = {"EVALFLEET_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}"}
    assert run(env, "migrate").exit_code == 0
    return env


@pytest.mark.parametrize("args", [["alerts", "list", "--all"], ["cost"]])
def test_json_tables_start_empty(env: dict[str, str], args: list[str]) -> None:
    result = run(env, *args, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == []


def test_metrics_json(env: dict[str, str]) -> None:
    result = run(env, "metrics", "--json")
    listed = {m["name"]: m for m in json.loads(result.stdout)}
    assert set(listed) >= {"rag_qa", "context_precision", "bbh_match", "rec_faithfulness"}
    assert listed["rag_qa"]["queue"] == "eval.rag_qa" and "faithfulness" in listed["rag_qa"][
        "scores"]


def test_alerts_show_json_of_a_rule_never_evaluated(env: dict[str, str]) -> None:
    result = run(env, "alerts", "show", "rag_qa_faithfulness_drop", "--json")
    assert result.exit_code == 0, result.output
    view = json.loads(result.stdout)
    assert (view["rule"], view["segment"], view["state"], view["history"]) == (
        "rag_qa_faithfulness_drop", "(all)", None, [])
    assert view["at"].endswith("Z")


@pytest.mark.parametrize("command", [["ui"], ["ingest"]])
def test_one_port_range(command: list[str]) -> None:
    assert_one_line(run({}, *command, "--port", "0"), "0 is not in the range 1<=x<=65535")


@pytest.mark.parametrize("command", [
    ["ui"], ["status", "--sample", "0"], ["alerts", "list"], ["review", "status"], ["export"],
    ["cost"], ["dead-letters", "list"], ["worker", "-Q", "rag_qa"]])
def test_a_command_in_an_empty_folder_makes_no_database(tmp_path: Path,
                                                         command: list[str]) -> None:
    assert_one_line(run({}, *command), "no evalfleet store at", "yet",
                    "run `evalfleet migrate` to create one")
    assert not (tmp_path / ".evalfleet").exists()


def test_migrate_says_what_it_did(tmp_path: Path) -> None:
    env = {"EVALFLEET_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}"}
    assert run(env, "migrate").stdout.startswith("created the schema (revision ")
    assert run(env, "migrate").stdout.startswith("schema is up to date (revision ")


def test_alerts_check_writes_time_as_people_read_it_elsewhere(env: dict[str, str]) -> None:
    result = run(env, "alerts", "check", "--at", "2026-11-21T13:30:27+00:00", "--no-deliver")
    assert result.stdout.splitlines()[0] == "alerts evaluated at 2026-11-21T13:30Z"
