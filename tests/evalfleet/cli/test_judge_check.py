"""``evalfleet judge check`` against the judge simulator in each of its fault modes."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from evalfleet.cli import main
from evalfleet.core.endpoint import JudgeEndpoint
from evalfleet.core.settings import Settings
from evalfleet.judgesim import RunningSim, SimConfig, start_in_thread
from evalfleet.localfleet import SIMULATOR_MODEL
from tests.helpers import cascade_metrics


def judge_check(settings: Settings, *args: str) -> tuple[int, dict[str, Any], str]:
    """Run ``evalfleet judge check --json``: exit status, report, problem lines."""
    result = CliRunner().invoke(main, ["judge", "check", "--json", *args],
                                env=settings.as_environment(), catch_exceptions=False)
    assert result.stdout.startswith("{"), (result.stdout, result.stderr)
    return result.exit_code, json.loads(result.stdout), result.stderr


@pytest.fixture
def sim_settings(settings: Settings) -> Settings:
    # The name the demo's verdicts carry is the one the simulator lists.
    return settings.model_copy(update={"judge_model": SIMULATOR_MODEL})


def probes(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {probe["what"]: probe for probe in report["probes"]}


def test_a_judge_that_works_passes_with_every_probe(sim_settings: Settings,
                                                    sim: RunningSim) -> None:
    status, report, problems = judge_check(sim_settings)
    assert (status, report["problems"], problems) == (0, [], "")
    seen = probes(report)
    assert [name for name in seen if name.startswith("metric ")] == [
        "metric agent_task_completion", "metric agent_tool_use", "metric bbh_match",
        "metric context_precision", "metric conversation_faithfulness",
        "metric conversation_goal_completion", "metric rag_qa", "metric rec_faithfulness",
        "metric user_frustration"]
    assert all(probe["ok"] for probe in seen.values())
    assert seen["metric rag_qa"]["detail"] == "verdict parsed (json_schema)"
    assert seen["metric rag_qa"]["prompt_tokens"] > 0


def test_a_refused_format_is_reported_and_stepped_down_not_a_problem(
    sim_settings: Settings, sim: RunningSim,
) -> None:
    sim.configure(refused_response_formats=["json_schema"], server_style="llama_cpp_python")
    status, report, _ = judge_check(sim_settings, "--metric", "rag_qa")
    seen = probes(report)
    assert status == 0
    assert not seen["format json_schema"]["ok"]
    assert seen["format json_schema"]["detail"].startswith("refused (stepped down)")
    assert seen["metric rag_qa"]["detail"] == "verdict parsed (json_object_schema)"


def test_a_refused_prompt_cache_key_is_reported_not_a_problem(
    sim_settings: Settings, sim: RunningSim,
) -> None:
    sim.configure(refused_parameters=["prompt_cache_key"])
    status, report, problems = judge_check(sim_settings, "--metric", "context_precision")
    assert (status, problems) == (0, "")
    assert probes(report)["metric context_precision"]["detail"] == (
        "verdict parsed (json_schema); prompt_cache_key refused, not sent")


@pytest.mark.parametrize(("config", "script", "says"), [
    ({"server_error_rate": 1.0}, None, "judge answered 500"),
    ({}, [{"match": "", "replies": [{"status": 401}], "then": "repeat_last"}], None),
    ({"context_tokens": 200}, None, "longer than the judge's context"),
    ({"malformed_rate": 1.0, "malformed_kinds": ["missing_brace"]}, None, "no usable verdict"),
])
def test_each_fault_is_one_problem_line_and_exit_status_2(
    config: dict[str, Any], script: list[dict[str, Any]] | None, says: str | None,
    sim_settings: Settings, sim: RunningSim,
) -> None:
    sim.configure(**config)
    if script:
        sim.script(script)
    status, report, problems = judge_check(sim_settings, "--metric", "rag_qa")
    assert status == 2 and report["problems"]
    lines = problems.strip().splitlines()
    assert len(lines) == len(report["problems"])
    assert all(line.startswith("problem: ") for line in lines)
    if says is not None:
        assert says in problems


def test_an_unreachable_judge_is_one_problem(settings: Settings) -> None:
    status, report, problems = judge_check(
        settings.model_copy(update={"openai_base_url": "http://127.0.0.1:1/v1"}))
    assert status == 2 and [probe["what"] for probe in report["probes"]] == ["models"]
    assert problems.count("problem: ") == 1 and "cannot reach the judge" in problems


def test_a_model_the_judge_does_not_list_is_a_problem(settings: Settings,
                                                      sim: RunningSim) -> None:
    status, _, problems = judge_check(
        settings.model_copy(update={"judge_model": "no-such-model"}), "--metric", "rag_qa")
    assert status == 2 and "no-such-model not listed by the judge" in problems


def test_the_table_is_for_people(sim_settings: Settings, sim: RunningSim) -> None:
    result = CliRunner().invoke(main, ["judge", "check", "--metric", "bbh_match"],
                                env=sim_settings.as_environment(), catch_exceptions=False)
    assert result.exit_code == 0
    header = result.stdout.splitlines()[1]
    assert header.split() == ["probe", "ok", "latency", "ms", "prompt", "completion", "cached",
                              "detail"]
    assert "verdict parsed" in result.stdout


def test_every_endpoint_a_cascade_tier_names_is_probed(
    sim_settings: Settings, sim: RunningSim, tmp_path: Path,
) -> None:
    """Two tiers on two named endpoints: one a second simulator, one a port nothing listens
    on. The check probes both, and its problem names the endpoint that is down."""
    sim.configure(models=[SIMULATOR_MODEL, "large"])
    local = start_in_thread(SimConfig.build({"latency_ms": 5, "models": ["small"]}))
    with socket.socket() as probe:  # a port that was free: nothing listens there
        probe.bind(("127.0.0.1", 0))
        down_port = probe.getsockname()[1]
    metrics_dir = cascade_metrics(tmp_path / "metrics", (
        "  cascade:\n    - {model: small, endpoint: local, top_logprobs: 5}\n"
        "    - {model: medium, endpoint: backup}\n    - {model: large}\n"))
    settings = sim_settings.model_copy(update={
        "metrics_dir": metrics_dir, "judge_endpoints": {
            "local": JudgeEndpoint(base_url=local.base_url),
            "backup": JudgeEndpoint(base_url=f"http://127.0.0.1:{down_port}/v1")}})
    try:
        status, report, problems = judge_check(settings, "--metric", "bbh_match")
    finally:
        local.stop()
    seen = probes(report)
    assert status == 2
    assert seen["models (endpoint local)"]["ok"]
    assert not seen["models (endpoint backup)"]["ok"]
    (problem,) = report["problems"]
    assert problem.startswith(f"endpoint backup at http://127.0.0.1:{down_port}/v1")
    assert "cannot be used" in problem
    assert "endpoint backup" in problems and "endpoint local" not in problems
