"""A setting that is wrong or misspelt is one line before any command runs (ui and demo
included): exit status 2 for a bad value, a warning naming the closest setting for an
unknown ``EVALFLEET_*`` variable, exit status 2 for it with EVALFLEET_STRICT_SETTINGS."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.evalfleet.cli.test_boundary import assert_one_line, console, run

COMMANDS = [["ui"], ["demo"], ["export"], ["status"], ["migrate"], ["produce", "-",
            "--metric", "rag_qa"], ["alerts", "list"], ["judge", "check"], ["metrics"]]


@pytest.mark.parametrize("args", COMMANDS)
@pytest.mark.parametrize(("variable", "value"), [
    ("EVALFLEET_REVIEW_RATES", "{rag_qa: 0.1}"), ("EVALFLEET_JUDGE_MODELS", "rag_qa=gpt-4.1")])
def test_a_setting_that_is_not_json_is_one_line_in_every_command(
        args: list[str], variable: str, value: str) -> None:
    line = assert_one_line(run({variable: value}, *args), variable, "must be JSON", '{"<key>": ')
    assert value not in line


def test_the_console_script_says_it_in_one_line(tmp_path: Path) -> None:
    result = console({"EVALFLEET_REVIEW_RATES": "{rag_qa: 0.1}"}, "demo", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        'Error: EVALFLEET_REVIEW_RATES must be JSON, e.g. {"<key>": <number>}; it is not '
        "valid JSON"]
    assert not (tmp_path / ".evalfleet").exists()


def test_a_misspelt_setting_gets_a_warning_naming_the_closest(tmp_path: Path) -> None:
    env = {"EVALFLEET_DATABSE_URL": "postgresql://user:hunter2@db/x",
           "EVALFLEET_DATA_DIR": str(tmp_path / "data"), "EVALFLEET_TOKEN": "t0k",
           "EVALFLEET_TEST_POSTGRES": "postgresql://postgres@127.0.0.1/postgres"}
    result = run(env, "migrate")
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        "Warning: EVALFLEET_DATABSE_URL is not an evalfleet setting and is ignored; did you "
        "mean EVALFLEET_DATABASE_URL?"]
    assert "hunter2" not in result.output


def test_strict_settings_make_it_an_error(tmp_path: Path) -> None:
    env = {"EVALFLEET_DATABSE_URL": "postgresql://user:hunter2@db/x",
           "EVALFLEET_STRICT_SETTINGS": "true", "EVALFLEET_DATA_DIR": str(tmp_path / "data")}
    line = assert_one_line(run(env, "migrate"), "EVALFLEET_DATABSE_URL",
                           "did you mean EVALFLEET_DATABASE_URL?", "EVALFLEET_STRICT_SETTINGS")
    assert "hunter2" not in line
    assert not (tmp_path / "data").exists()
