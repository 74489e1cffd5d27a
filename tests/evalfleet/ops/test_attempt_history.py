"""The attempt history dead letters show: carried by the job message, kept by the evaluator.

(These test ``evalfleet/core/message.py`` and ``workers/evaluation.py``; they live here with
the feature that needs them.)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from evalfleet.core.errors import InvalidMessage
from evalfleet.core.message import (
    MAX_HISTORY_ERROR_CHARS,
    AttemptFailure,
    decode_batch,
    decode_job,
    encode_batch,
    encode_job,
    next_attempt,
)
from evalfleet.core.metric import load_registry
from evalfleet.judgesim import RunningSim
from evalfleet.store import SqlStore
from tests.evalfleet.ops.builders import job
from tests.helpers import evaluator_options
from workers.evaluation import Evaluator
from workers.judge import AsyncHttpJudge, JudgeFleet

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)


def test_history_round_trips_in_job_and_batch_messages() -> None:
    first = AttemptFailure(at=T0, attempt=1, error_class="judge_unavailable", error="500")
    second = AttemptFailure(at=T0 + timedelta(seconds=4), attempt=2,
                            error_class="judge_unavailable", error="timeout")
    failed = next_attempt(next_attempt(job(), failure=first), failure=second)
    assert failed.attempt == 3 and failed.history == (first, second)
    assert decode_job(json.loads(json.dumps(encode_job(failed)))) == failed
    assert decode_batch(json.loads(json.dumps(encode_batch([failed, job("b")])))) == [
        failed, job("b")]


def test_messages_without_history_stay_as_they_were() -> None:
    assert "history" not in encode_job(job())
    assert "history" not in encode_batch([job()])["jobs"][0]
    assert decode_job(encode_job(job())).history == ()


def test_long_errors_are_cut() -> None:
    failure = AttemptFailure.of(job(), at=T0, error_class="x", error="e" * 5000)
    assert len(failure.error) == MAX_HISTORY_ERROR_CHARS and failure.attempt == 1


@pytest.mark.parametrize("history", ["no", [{"at": "then"}], [5], [{"at": "2026-11-22T10:00:00Z"}]])
def test_a_bad_history_is_an_invalid_message(history: Any) -> None:
    data = {**encode_job(job()), "history": history}
    with pytest.raises(InvalidMessage, match="bad history") as caught:
        decode_job(data)
    assert caught.value.data == data


@pytest.fixture
def evaluator(store: SqlStore, sim: RunningSim) -> Iterator[Evaluator]:
    judge = JudgeFleet(AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=5,
                                       max_connections=4), concurrency=4)
    options = evaluator_options(judge_model="judge-sim", max_attempts=3, retry_base_s=0.1,
                               retry_max_s=1)
    yield Evaluator(registry=load_registry(), store=store, judge=judge, options=options,
                    jitter=lambda: 0.0, clock=lambda: T0)
    judge.close()


def script(sim: RunningSim, status: int) -> None:
    sim.script([{"match": "", "replies": [{"status": status}], "then": "repeat_last"}])


def test_each_retry_adds_to_the_history_and_the_dead_letter_has_it_all(
        evaluator: Evaluator, store: SqlStore, sim: RunningSim) -> None:
    script(sim, 500)
    current = job()
    for attempt in (1, 2):
        outcome = evaluator.run(current, owner=f"m{attempt}")
        assert outcome.kind == "retry" and outcome.retry_job is not None
        current = decode_batch(json.loads(json.dumps(encode_batch([outcome.retry_job]))))[0]
        assert [entry.attempt for entry in current.history] == list(range(1, attempt + 1))
        assert current.history[-1].error_class == "judge_unavailable"
        assert "500" in current.history[-1].error
    assert evaluator.run(current, owner="m3").kind == "dead_letter"
    (letter,) = store.iter_dead_letters()
    assert [(e["attempt"], e["error_class"]) for e in letter.history] == [
        (1, "judge_unavailable"), (2, "judge_unavailable"), (3, "judge_unavailable")]
    assert letter.history[-1]["error"].startswith("gave up after 3 attempts")
    assert letter.history[0]["at"] == T0.isoformat()
    assert len(letter.payload["history"]) == 2  # the job as it was delivered


def test_a_rejection_is_a_dead_letter_with_one_entry(evaluator: Evaluator, store: SqlStore,
                                                     sim: RunningSim) -> None:
    script(sim, 404)
    assert evaluator.run(job(), owner="m1").detail == "judge_rejected"
    (letter,) = store.iter_dead_letters()
    assert [(e["attempt"], e["error_class"]) for e in letter.history] == [(1, "judge_rejected")]
