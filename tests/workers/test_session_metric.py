"""Session-unit metrics through the evaluator, against Postgres and the judge simulator:
the prompt shows the conversation turn by turn, a long session is compacted turn by turn
(the same way twice, recorded on the verdict), one that cannot fit is a named failed
verdict without a judge call, and each version of a session is its own verdict."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from evalfleet.core.message import new_job
from evalfleet.core.metric import MetricRegistry, load_registry
from evalfleet.core.sample import parse_sample
from evalfleet.core.session import version_id
from evalfleet.judgesim import RunningSim
from evalfleet.store import SqlStore
from evalfleet.store.queries.evidence import sample_content
from evalfleet.store.queries.export import export_row
from evalfleet.store.schema import verdict_scores, verdicts
from tests.workers.test_trace_metric import make_evaluator  # noqa: F401 (a fixture)
from workers.renderer import render

SESSION_METRICS = [("conversation_goal_completion", "goal_completion"),
                   ("conversation_faithfulness", "conversation_faithfulness"),
                   ("user_frustration", "no_frustration")]


def turn(n: int, *, answer_chars: int = 0, documents: int = 1) -> dict[str, Any]:
    return {"trace_id": f"{n:032x}", "input": f"Question {n}: weather in Oslo on day {n}?",
            "output": f"Answer {n}: rain." + "x" * answer_chars,
            "context": [f"Forecast day {n}: rain, 4 C. " + "y" * answer_chars] * documents,
            "trajectory": {"steps": [{"type": "tool", "name": "get_weather",
                                      "arguments": {"city": "Oslo", "day": n},
                                      "result": "4 C, rain" + "z" * answer_chars}]}}


def session_sample(turns: list[dict[str, Any]], session_id: str = "conv-1", *,
                   closed_by: str = "idle") -> Any:
    trace_ids = [t["trace_id"] for t in turns]
    return parse_sample({"id": version_id(session_id, trace_ids), "input": turns[0]["input"],
                         "output": turns[-1]["output"],
                         "session": {"id": session_id, "turns": turns,
                                     "closed_by": closed_by}})


def registry_with_budget(tmp_path: Path, metric: str, budget_tokens: int) -> MetricRegistry:
    source = Path(load_registry().get(metric).path).read_text()
    (tmp_path / f"{metric}.yaml").write_text(
        source.replace("budget_tokens: 32000", f"budget_tokens: {budget_tokens}"))
    return load_registry(tmp_path)


@pytest.mark.parametrize(("metric", "score"), SESSION_METRICS)
def test_a_session_is_judged_turn_by_turn(make_evaluator: Any, store: SqlStore,  # noqa: F811
                                          sim: RunningSim, metric: str, score: str) -> None:
    registry = load_registry()
    sample = session_sample([turn(1), turn(2), turn(3)])
    outcome = make_evaluator(registry).run(new_job(metric, sample), owner="w1")
    assert (outcome.kind, outcome.detail) == ("stored", "ok")
    (verdict,) = store.iter_verdicts()
    assert verdict.key.sample_id == sample.id and sample.id.startswith("conv-1#3-")
    assert verdict.scores[score] is not None and verdict.compaction is None
    messages = render(registry.get(metric), sample).messages
    assert sim.requests_for(messages) == 1
    prompt = messages[0]["content"]
    assert prompt.index("Turn 1 of 3") < prompt.index("Turn 2 of 3") < prompt.index("Turn 3")
    assert "  [user] Question 2: weather in Oslo on day 2?" in prompt
    assert 'tool call get_weather with arguments {"city": "Oslo", "day": 3}' in prompt
    assert "  retrieved [1] Forecast day 1" in prompt
    # The evidence kept with a verdict holds the turns.
    assert len(sample_content(sample.to_json())["session"]["turns"]) == 3


def test_each_version_of_a_session_is_its_own_verdict(make_evaluator: Any,  # noqa: F811
                                                      store: SqlStore, sim: RunningSim) -> None:
    evaluator = make_evaluator(load_registry())
    metric = "conversation_goal_completion"
    three, four = session_sample([turn(1), turn(2), turn(3)]), session_sample(
        [turn(1), turn(2), turn(3), turn(4)])
    for sample in (three, four, three):  # the third is a redelivery of the first
        evaluator.run(new_job(metric, sample), owner="w1")
    assert sorted(v.key.sample_id for v in store.iter_verdicts()) == sorted([three.id, four.id])
    assert sim.stats()["requests"] == 2


def scored_sample_ids(store: SqlStore) -> list[str]:
    """The verdicts whose scores are in the series alerts and estimates read."""
    with store.engine.connect() as conn:
        return sorted(conn.execute(select(verdicts.c.sample_id).join(
            verdict_scores, verdict_scores.c.verdict_id == verdicts.c.id)).scalars())


def test_an_idle_version_counts_once_the_same_turns_come_again_final(
        make_evaluator: Any, store: SqlStore, sim: RunningSim) -> None:  # noqa: F811
    evaluator = make_evaluator(load_registry())
    metric = "conversation_goal_completion"
    turns = [turn(1), turn(2)]
    idle, ended = session_sample(turns), session_sample([turn(3)], "conv-2", closed_by="end")
    for sample in (idle, ended):
        assert evaluator.run(new_job(metric, sample), owner="w1").kind == "stored"
    provisional = {v.key.sample_id: v.provisional for v in store.iter_verdicts()}
    assert provisional == {idle.id: True, ended.id: False}
    assert scored_sample_ids(store) == [ended.id]
    # The producer sends the idle version's turns again once its final wait passed.
    final = session_sample(turns, closed_by="final_wait")
    assert final.id == idle.id
    assert evaluator.run(new_job(metric, final), owner="w2").kind == "duplicate"
    assert [v.provisional for v in store.iter_verdicts()] == [False, False]
    assert scored_sample_ids(store) == sorted([idle.id, ended.id])
    assert sim.stats()["requests"] == 2  # marked, never judged again
    # A final version judged first (its idle job lost or late) is final at once.
    late = session_sample([turn(4)], "conv-3", closed_by="final_wait")
    evaluator.run(new_job(metric, late), owner="w1")
    evaluator.run(new_job(metric, session_sample([turn(4)], "conv-3")), owner="w1")
    assert not next(v for v in store.iter_verdicts() if v.key.sample_id == late.id).provisional
    assert late.id in scored_sample_ids(store)


def test_a_long_session_is_compacted_turn_by_turn_the_same_way_twice(
        make_evaluator: Any, store: SqlStore, sim: RunningSim, tmp_path: Path) -> None:  # noqa: F811
    metric = "conversation_faithfulness"
    registry = registry_with_budget(tmp_path, metric, 6_000)
    sample = session_sample([turn(n, answer_chars=2_000) for n in range(1, 41)])
    first = render(registry.get(metric), sample)
    assert first == render(registry.get(metric), sample)
    assert first.compaction is not None
    prompt = first.messages[0]["content"]
    assert len(prompt) <= 6_000 * 3
    # Every user message and every call is kept; the last answer whole.
    assert all(f"[user] Question {n}: weather" in prompt for n in range(1, 41))
    assert all(f'"day": {n}}}' in prompt for n in range(1, 41))
    assert "Answer 40: rain." + "x" * 2_000 in prompt
    assert "characters of this answer cut" in prompt or "cut whole" in prompt
    outcome = make_evaluator(registry).run(new_job(metric, sample), owner="w1")
    assert (outcome.kind, outcome.detail) == ("stored", "ok")
    (verdict,) = store.iter_verdicts()
    assert verdict.compaction == first.compaction.as_json()
    assert export_row(verdict)["compaction"]["pieces_cut"] > 40


def test_a_session_that_cannot_fit_is_a_named_failed_verdict_without_a_call(
        make_evaluator: Any, store: SqlStore, sim: RunningSim, tmp_path: Path) -> None:  # noqa: F811
    metric = "user_frustration"
    registry = registry_with_budget(tmp_path, metric, 1_500)
    sample = session_sample([turn(n) for n in range(1, 300)])
    outcome = make_evaluator(registry).run(new_job(metric, sample), owner="w1")
    assert (outcome.kind, outcome.detail) == ("stored", "failed")
    (verdict,) = store.iter_verdicts()
    assert verdict.error_class == "session_too_long"
    assert "session cannot be compacted" in (verdict.error or "")
    assert sim.stats()["requests"] == 0


def test_a_final_job_published_only_to_mark_never_calls_the_judge(
        make_evaluator: Any, store: SqlStore, sim: RunningSim) -> None:  # noqa: F811
    evaluator = make_evaluator(load_registry())
    metric = "conversation_goal_completion"
    # Its idle version judged before: the mark-only job marks it final.
    idle = session_sample([turn(1), turn(2)])
    assert evaluator.run(new_job(metric, idle), owner="w1").kind == "stored"
    final = new_job(metric, session_sample([turn(1), turn(2)], closed_by="final_wait"),
                    finalise_only=True)
    assert evaluator.run(final, owner="w2").kind == "duplicate"
    assert scored_sample_ids(store) == [idle.id]
    # Its idle version still queued behind it: no verdict, no call, no claim left; the
    # idle version's verdict is final once saved.
    later = session_sample([turn(3)], "conv-2")
    early = new_job(metric, session_sample([turn(3)], "conv-2", closed_by="final_wait"),
                    finalise_only=True)
    assert evaluator.run(early, owner="w2").kind == "duplicate"
    assert [v.key.sample_id for v in store.iter_verdicts()] == [idle.id]
    assert evaluator.run(new_job(metric, later), owner="w1").kind == "stored"
    assert not next(v for v in store.iter_verdicts() if v.key.sample_id == later.id
                    ).provisional
    assert scored_sample_ids(store) == sorted([idle.id, later.id])
    assert sim.stats()["requests"] == 2
