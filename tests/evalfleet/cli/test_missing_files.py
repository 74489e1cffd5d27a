"""A missing input file is one error line naming it, exit status 2, in every command that
reads one; a missing alert rules file is reported by `alerts list` as by `alerts check`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.evalfleet.cli.test_boundary import assert_one_line, run


@pytest.mark.parametrize("args", [
    ["demo", "--samples", "nosuch.jsonl"],
    ["produce", "nosuch.jsonl", "--metric", "rag_qa"],
    ["review", "import", "nosuch.jsonl"],
    ["calibrate", "nosuch.jsonl", "--metric", "rag_qa"],
    ["metrics", "show", "rag_qa", "--sample", "nosuch.jsonl"],
])
def test_a_missing_input_file_is_one_line_and_exit_2(tmp_path: Path, args: list[str]) -> None:
    result = run({"EVALFLEET_DATA_DIR": str(tmp_path / "data")}, *args)
    assert_one_line(result, "'nosuch.jsonl' does not exist")
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("args", [["alerts", "check"], ["alerts", "list"]])
def test_a_missing_rules_file_is_reported_by_check_and_list(
        tmp_path: Path, args: list[str]) -> None:
    env = {"EVALFLEET_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}",
           "EVALFLEET_ALERT_RULES_FILE": str(tmp_path / "nosuch.yaml")}
    assert run(env, "migrate").exit_code == 0
    assert_one_line(run(env, *args), f"{tmp_path / 'nosuch.yaml'}: cannot read")
