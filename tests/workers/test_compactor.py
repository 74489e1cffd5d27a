"""Compacting a trajectory into a budget: what is kept, what is cut and how it says so,
the same text every time, and a named failure when even the kept parts do not fit."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from evalfleet.core.trajectory import Trajectory
from workers.compactor import TrajectoryTooLong, render_tools, render_trajectory


def long_run(steps: int = 20, result_chars: int = 5_000) -> Trajectory:
    data: list[dict[str, Any]] = [{"type": "model", "model": "m-1", "input": [
        {"role": "system", "content": "S" * 3_000},
        {"role": "user", "content": "Find the cheapest flight to Oslo."}],
        "output": [{"role": "assistant", "content": "T" * 2_000, "tool_calls": [
            {"id": "c0", "name": "search", "arguments": {"to": "OSL", "n": 0}}]}]}]
    for n in range(steps):
        data.append({"type": "tool", "name": "search", "call_id": f"c{n}",
                     "arguments": {"to": "OSL", "n": n},
                     "result": f"<{n}>" + "r" * result_chars + f"</{n}>"})
        data.append({"type": "retrieval", "documents": ["d" * 1_000]})
    data.append({"type": "model", "input": [{"role": "tool", "content": "x" * 4_000}],
                 "output": [{"role": "assistant", "content": "The cheapest is SK4411."}]})
    return Trajectory.model_validate({"steps": data, "final_answer": "The cheapest is SK4411."})


def test_a_trajectory_within_budget_is_written_whole() -> None:
    run = long_run(steps=2, result_chars=10)
    text, compaction = render_trajectory(run, budget_chars=1_000_000)
    assert compaction is None and "[..." not in text
    assert "Step 2: tool call search (call c0)" in text and '"n": 0' in text


def test_compaction_keeps_question_answer_and_every_call_and_cuts_the_middle() -> None:
    run = long_run()
    whole, _ = render_trajectory(run, budget_chars=10**9)
    text, compaction = render_trajectory(run, budget_chars=20_000)
    assert compaction is not None and len(text) <= 20_000
    assert compaction.original_chars == len(whole)
    assert compaction.cut_chars == len(whole) - len(text) and compaction.pieces_cut > 20
    assert "[user] Find the cheapest flight to Oslo." in text
    assert "[assistant] The cheapest is SK4411." in text
    for n in range(20):  # every call's name and arguments, whole
        assert f'arguments: {{"n": {n}, "to": "OSL"}}' in text
        # A result keeps its head and its tail around the marker.
        assert re.search(rf"result: <{n}>r*\[\.\.\. [\d,]+ of 5,\d+ characters of this "
                         rf"tool result cut \.\.\.\]r*</{n}>", text)
    assert "of this message cut ...]" in text and "of this document cut ...]" in text


def test_the_same_trajectory_compacts_to_the_same_text() -> None:
    first = render_trajectory(long_run(), budget_chars=15_000)
    assert render_trajectory(long_run(), budget_chars=15_000) == first


def test_a_trajectory_whose_kept_parts_pass_the_budget_is_refused_by_name() -> None:
    with pytest.raises(TrajectoryTooLong) as caught:
        render_trajectory(long_run(), budget_chars=500)
    assert caught.value.field == "trajectory" and "budget of 500 characters" in str(caught.value)


def test_compaction_time_is_linear_in_a_huge_trajectory() -> None:
    run = long_run(steps=500, result_chars=20_000)  # about 10 MB of text
    started = time.perf_counter()
    text, compaction = render_trajectory(run, budget_chars=100_000)
    assert compaction is not None and len(text) <= 100_000
    assert time.perf_counter() - started < 30  # a bound on a hang, not a speed figure


def test_offered_tools_are_listed_with_their_schema() -> None:
    run = Trajectory.model_validate({"tools": [
        {"name": "search", "description": "Flights", "parameters": {"type": "object"}},
        {"name": "book"}]})
    assert render_tools(run.tools) == ('- search: Flights\n  parameters: {"type": "object"}\n'
                                       "- book")
    assert render_tools([]) == "(no tools were offered)"
