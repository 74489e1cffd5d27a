"""The HTTP runner keeps many judge calls in flight from one thread."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from evalfleet.errors import JudgeRejected, JudgeUnavailable
from evalfleet.judgesim import RunningSim
from workers.judge import AsyncHttpJudge, JudgeReply, JudgeRequest, JudgeRunner


@pytest.fixture
def runner(sim: RunningSim) -> Iterator[JudgeRunner]:
    client = AsyncHttpJudge(base_url=sim.base_url, api_key="sk-test", timeout_s=5,
                            max_connections=64)
    judge_runner = JudgeRunner(client, concurrency=64)
    yield judge_runner
    judge_runner.close()


def request(n: int) -> JudgeRequest:
    return JudgeRequest(messages=[{"role": "user", "content": f"Rate answer {n}."}],
                        model="judge-sim", temperature=0.0, max_tokens=100)


def test_a_batch_is_in_flight_at_once(runner: JudgeRunner, sim: RunningSim) -> None:
    sim.configure(latency_ms=300)
    replies = runner.complete_many([request(n) for n in range(64)])
    assert all(isinstance(reply, JudgeReply) and reply.text for reply in replies)
    stats = sim.stats()
    assert stats["requests"] == 64 and stats["max_in_flight"] >= 60


def test_concurrency_is_capped(sim: RunningSim) -> None:
    client = AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=5, max_connections=8)
    capped = JudgeRunner(client, concurrency=4)
    sim.configure(latency_ms=100)
    capped.complete_many([request(n) for n in range(20)])
    capped.close()
    assert sim.stats()["max_in_flight"] == 4


def test_errors_come_back_per_request(runner: JudgeRunner, sim: RunningSim) -> None:
    sim.script([
        {"match": "answer 1.", "replies": [{"status": 429, "retry_after": 3}]},
        {"match": "answer 2.", "replies": [{"status": 401}]},
    ])
    ok, limited, denied = runner.complete_many([request(0), request(1), request(2)])
    assert isinstance(ok, JudgeReply) and ok.prompt_tokens
    assert isinstance(limited, JudgeUnavailable) and limited.retry_after_s == 3
    assert isinstance(denied, JudgeRejected) and denied.is_access_problem


def test_timeouts_and_unreachable_judges_are_transient(sim: RunningSim) -> None:
    slow = JudgeRunner(AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=0.2,
                                      max_connections=2), concurrency=2)
    sim.configure(latency_ms=1000)
    (timed_out,) = slow.complete_many([request(0)])
    slow.close()
    nowhere = JudgeRunner(AsyncHttpJudge(base_url="http://127.0.0.1:1/v1", api_key=None,
                                         timeout_s=1, max_connections=2), concurrency=2)
    (refused,) = nowhere.complete_many([request(0)])
    nowhere.close()
    assert isinstance(timed_out, JudgeUnavailable) and "timed out" in str(timed_out)
    assert isinstance(refused, JudgeUnavailable) and "cannot reach" in str(refused)
