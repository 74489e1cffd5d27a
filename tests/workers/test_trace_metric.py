"""A trace-unit metric through the evaluator, against Postgres and the judge simulator:
the prompt shows the tool calls and the offered tools, a trajectory over the budget is
compacted (recorded on the verdict and exported), one that cannot fit is a named failed
verdict without a judge call."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalfleet.core.message import new_job
from evalfleet.core.metric import MetricRegistry, load_registry
from evalfleet.core.sample import parse_sample
from evalfleet.judgesim import RunningSim
from evalfleet.store import SqlStore
from evalfleet.store.queries.export import export_row
from tests.helpers import evaluator_options
from tests.workers.test_compactor import long_run
from workers.evaluation import Evaluator
from workers.judge import AsyncHttpJudge, JudgeFleet
from workers.judge.formats import FormatSupport
from workers.renderer import render

METRIC = "agent_task_completion"

RUN: dict[str, Any] = {
    "steps": [
        {"type": "model", "model": "m-1",
         "input": [{"role": "user", "content": "Weather in Oslo?"}],
         "output": [{"role": "assistant", "tool_calls": [
             {"id": "c1", "name": "get_weather", "arguments": {"city": "Oslo"}}]}]},
        {"type": "tool", "name": "get_weather", "call_id": "c1", "arguments": {"city": "Oslo"},
         "result": {"temp_c": 4, "sky": "rain"}},
        {"type": "model", "model": "m-1",
         "input": [{"role": "tool", "tool_call_id": "c1", "content": "4 C, rain"}],
         "output": [{"role": "assistant", "content": "4 C and rain in Oslo."}]}],
    "tools": [{"name": "get_weather", "description": "Weather now",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}],
    "final_answer": "4 C and rain in Oslo."}


def registry_with_budget(tmp_path: Path, budget_tokens: int) -> MetricRegistry:
    source = Path(load_registry().get(METRIC).path).read_text()
    assert "budget_tokens: 32000" in source
    (tmp_path / f"{METRIC}.yaml").write_text(
        source.replace("budget_tokens: 32000", f"budget_tokens: {budget_tokens}"))
    return load_registry(tmp_path)


@pytest.fixture
def make_evaluator(store: SqlStore, sim: RunningSim) -> Iterator[Any]:
    fleet = JudgeFleet(AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=5,
                                      max_connections=4),
                       concurrency=4, formats=FormatSupport("json_schema"))

    def make(registry: MetricRegistry) -> Evaluator:
        return Evaluator(registry=registry, store=store, judge=fleet,
                         options=evaluator_options(judge_model="judge-sim"), jitter=lambda: 0.0)

    yield make
    fleet.close()


def sample(trajectory: Any, **more: Any) -> Any:
    return parse_sample({"id": "5b8efff798038103d269b633813fc60c", "input": "Weather in Oslo?",
                         "output": "4 C and rain in Oslo.", "trajectory": trajectory, **more})


@pytest.mark.parametrize(("metric", "score"), [(METRIC, "task_completion"),
                                               ("agent_tool_use", "tool_use")])
def test_a_trace_is_judged_with_its_tool_calls_and_offered_tools(
        make_evaluator: Any, store: SqlStore, sim: RunningSim, metric: str, score: str) -> None:
    registry = load_registry()
    outcome = make_evaluator(registry).run(new_job(metric, sample(RUN)), owner="w1")
    assert (outcome.kind, outcome.detail) == ("stored", "ok")
    (verdict,) = store.iter_verdicts()
    assert verdict.key.sample_id == "5b8efff798038103d269b633813fc60c"
    assert verdict.scores[score] is not None and verdict.compaction is None
    messages = render(registry.get(metric), sample(RUN)).messages
    assert sim.requests_for(messages) == 1
    prompt = messages[0]["content"]
    assert 'asks for tool get_weather (call c1) with arguments {"city": "Oslo"}' in prompt
    assert '- get_weather: Weather now\n  parameters: {"properties"' in prompt


def test_a_trajectory_over_the_budget_is_compacted_the_same_way_twice(
        make_evaluator: Any, store: SqlStore, sim: RunningSim, tmp_path: Path) -> None:
    registry = registry_with_budget(tmp_path, 4_000)
    run = long_run().model_dump(mode="json")
    first = render(registry.get(METRIC), sample(run))
    assert first == render(registry.get(METRIC), sample(run))
    assert first.compaction is not None
    assert sum(len(m["content"]) for m in first.messages) <= 4_000 * 3
    outcome = make_evaluator(registry).run(new_job(METRIC, sample(run)), owner="w1")
    assert (outcome.kind, outcome.detail) == ("stored", "ok")
    (verdict,) = store.iter_verdicts()
    assert verdict.compaction == first.compaction.as_json()
    assert export_row(verdict)["compaction"]["cut_chars"] > 50_000
    assert sim.requests_for(first.messages) == 1


def test_a_trajectory_that_cannot_fit_is_a_named_failed_verdict_without_a_call(
        make_evaluator: Any, store: SqlStore, sim: RunningSim, tmp_path: Path) -> None:
    registry = registry_with_budget(tmp_path, 1_500)
    run = long_run(steps=300).model_dump(mode="json")
    outcome = make_evaluator(registry).run(new_job(METRIC, sample(run)), owner="w1")
    assert (outcome.kind, outcome.detail) == ("stored", "failed")
    (verdict,) = store.iter_verdicts()
    assert verdict.error_class == "trajectory_too_long"
    assert "cannot be compacted into the metric's budget" in (verdict.error or "")
    assert verdict.scores == {"task_completion": None}
    assert sim.stats()["requests"] == 0


def test_the_step_the_judge_names_is_kept_on_the_verdict(
        make_evaluator: Any, store: SqlStore) -> None:
    # A low score: the simulator names the run's first tool call, step 2, as a judge would.
    low = sample(RUN, input="Weather in Oslo? [[judge-sim tool_use=0.2]]")
    outcome = make_evaluator(load_registry()).run(new_job("agent_tool_use", low), owner="w1")
    assert (outcome.kind, outcome.detail) == ("stored", "ok")
    (verdict,) = store.iter_verdicts()
    assert verdict.failed_step == 2 and export_row(verdict)["failed_step"] == 2
    # A step the judge did not name stays null, as does any metric without a step field.
    fine = sample(RUN, id="fine", input="Weather in Oslo? [[judge-sim tool_use=0.9]]")
    make_evaluator(load_registry()).run(new_job("agent_tool_use", fine), owner="w1")
    assert {v.key.sample_id: v.failed_step for v in store.iter_verdicts()} == {
        "5b8efff798038103d269b633813fc60c": 2, "fine": None}
