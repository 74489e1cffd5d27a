"""Agents end to end, as a team would run them: an agent built with a real framework from
PyPI, two tools, its model played by the judge simulator, its traces exported over
OTLP/HTTP (``OTEL_*`` variables plus the framework's instrumentation call) to ``evalfleet
ingest``; a worker judges each trace with ``agent_task_completion``, whose prompt shows
the tool calls the agent made and the tools it was offered.

The fleet's plain traces wait at most 2 s (``otlp_max_wait_s``), so a run held longer than
that shows an agent's trace waits for its end; an ingest SIGKILLed mid-run shows its
accepted spans outlive it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from evalfleet.core.metric import load_registry
from evalfleet.core.sample import parse_sample
from evalfleet.core.trajectory import Trajectory
from evalfleet.judgesim import RunningSim
from producers.traces.buffer.redis import KEY_PREFIX
from tests.helpers import wait_until
from tests.producers.traces.test_end_to_end import (
    REPOSITORY,
    Fleet,
    _otel_environment,
    agent_fleet,
)
from workers.compactor import render_trajectory
from workers.renderer import render

METRIC = "agent_task_completion"
CONFIG = f"metrics: {{{METRIC}: {{rate: 1.0}}}}\n"
FRAMEWORKS = ["pydantic_ai", "openai_agents"]
TOOLS = ["get_weather", "get_local_time"]


@pytest.fixture(scope="module")
def fleet(postgres_url: str, redis_session_url: str, sim_session: RunningSim,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    with agent_fleet(tmp_path_factory.mktemp("agents"), config=CONFIG, metric=METRIC,
                     postgres_url=postgres_url, redis_url=redis_session_url,
                     sim=sim_session) as fleet:
        yield fleet


class AgentRun:
    """The agent app in a subprocess."""

    def __init__(self, fleet: Fleet, framework: str, question: str, *, hold: bool,
                 dump: Path | None = None) -> None:
        env = {**os.environ, **_otel_environment(fleet.url, fleet.settings),
               "OTEL_SERVICE_NAME": "travel-bot"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.producers.traces.agent_app", framework, question,
             *(["--hold"] if hold else []), *(["--dump", str(dump)] if dump else [])],
            cwd=REPOSITORY, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE)
        if hold:
            assert self.process.stdout is not None
            if self.process.stdout.readline().strip() != b"holding":
                raise AssertionError(self.process.communicate(timeout=30)[1].decode())

    def finish(self) -> dict[str, Any]:
        out, err = self.process.communicate(b"go\n", timeout=120)
        assert self.process.returncode == 0, err.decode()[-3000:]
        return json.loads(out.splitlines()[-1])  # type: ignore[no-any-return]


def buffered_spans(fleet: Fleet) -> int:
    client = redis.Redis.from_url(str(fleet.settings.broker.broker_url))
    return sum(client.llen(key) for key in client.scan_iter(f"{KEY_PREFIX}spans:*"))


def check_judged_whole(fleet: Fleet, sim: RunningSim, run: dict[str, Any]) -> dict[str, Any]:
    verdict = fleet.verdict(run["trace_id"])
    assert verdict["status"] == "ok", verdict
    sample = verdict["sample"]
    trajectory = sample["trajectory"]
    tools = [s for s in trajectory["steps"] if s["type"] == "tool"]
    assert [s["name"] for s in tools] == TOOLS
    assert all(s["arguments"] == {"city": sample["input"]} for s in tools)
    assert tools[0]["result"] == f"4 C and rain in {sample['input']}"
    assert sorted(t["name"] for t in trajectory["tools"]) == sorted(TOOLS)
    assert all(t["parameters"]["properties"]["city"]["type"] == "string"
               for t in trajectory["tools"])
    assert sample["output"] == run["answer"] == trajectory["final_answer"]
    # The judge was sent the prompt with the calls and the offered tools.
    messages = render(load_registry().get(METRIC), parse_sample(
        {"id": verdict["sample_id"], **sample})).messages
    prompt = messages[0]["content"]
    assert "asks for tool get_local_time" in prompt and "- get_weather: Current weather" in prompt
    assert sim.requests_for(messages) >= 1
    return verdict


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_an_agent_is_judged_with_its_tool_calls_and_offered_tools(
        fleet: Fleet, sim_session: RunningSim, framework: str, tmp_path: Path) -> None:
    dump = tmp_path / "spans.json"
    run = AgentRun(fleet, framework, f"Weather and time in Oslo? ({framework})", hold=False,
                   dump=dump).finish()
    verdict = check_judged_whole(fleet, sim_session, run)
    assert verdict["attributes"]["app"] == "travel-bot"
    assert verdict["scores"]["task_completion"] is not None
    names = {span["name"] for span in json.loads(dump.read_text())}
    assert {"execute_tool get_weather", "invoke_agent travel_agent"} <= names or {
        "get_weather", "travel_agent", "generation"} <= names
    # Over a budget, this framework's run is cut the same way every time, its calls kept.
    run = Trajectory.model_validate(verdict["sample"]["trajectory"])
    whole, _ = render_trajectory(run, budget_chars=10**9)
    first = render_trajectory(run, budget_chars=len(whole) - 100)
    assert first[1] is not None and first[1].cut_chars > 0
    assert render_trajectory(run, budget_chars=len(whole) - 100) == first
    assert "get_weather" in first[0] and "get_local_time" in first[0]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_run_longer_than_a_plain_traces_wait_is_judged_whole(
        fleet: Fleet, sim_session: RunningSim, framework: str) -> None:
    before = buffered_spans(fleet)
    agent = AgentRun(fleet, framework, f"Weather and time in Bergen? ({framework})", hold=True)
    wait_until(lambda: buffered_spans(fleet) > before, timeout_s=30,
               what="the run's first spans buffered")
    time.sleep(3)  # the scenario: the run outlasts the 2 s a plain trace waits
    check_judged_whole(fleet, sim_session, agent.finish())


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_an_ingest_killed_mid_run_loses_no_span(
        fleet: Fleet, sim_session: RunningSim, framework: str) -> None:
    before = buffered_spans(fleet)
    agent = AgentRun(fleet, framework, f"Weather and time in Tromso? ({framework})", hold=True)
    wait_until(lambda: buffered_spans(fleet) > before, timeout_s=30,
               what="the run's first spans buffered")
    fleet.kill_ingest()
    fleet.start_ingest()
    verdict = check_judged_whole(fleet, sim_session, agent.finish())
    assert len(verdict["sample"]["trajectory"]["steps"]) == 5  # 3 model calls, 2 tools
