"""Both judge providers read the answer body with a size cap, against the simulator."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace

import pytest

from evalfleet.judgesim import RunningSim
from tests.workers.judge.test_fleet import request
from workers.judge import (
    AsyncHttpJudge,
    JudgeClient,
    JudgeFleet,
    JudgeProvider,
    JudgeReply,
    OpenAIJudge,
)
from workers.judge.reply import TOO_LARGE, reply_from_body

CAP_BYTES = 64 * 1024


@pytest.fixture(params=["http", "openai"])
def judge(request: pytest.FixtureRequest, sim: RunningSim) -> Iterator[JudgeClient]:
    provider: JudgeProvider
    if request.param == "http":
        provider = AsyncHttpJudge(base_url=sim.base_url, api_key="sk-test", timeout_s=5,
                                  max_connections=4, max_reply_bytes=CAP_BYTES)
    else:
        provider = OpenAIJudge(base_url=sim.base_url, api_key="sk-test", timeout_s=5,
                               max_reply_bytes=CAP_BYTES)
    client = JudgeFleet(provider, concurrency=4)
    yield client
    client.close()


def test_a_reply_over_the_cap_is_not_read(judge: JudgeClient, sim: RunningSim) -> None:
    sim.script([{"match": "answer 1", "replies": [{"content": "x" * 5_000_000}]},
                {"match": "answer 2", "replies": [{"content": "y" * 1000}]}])
    big, small = judge.complete_many([request(1), request(2)])
    assert isinstance(big, JudgeReply) and big.finish_reason == TOO_LARGE
    assert big.text is None
    assert isinstance(small, JudgeReply) and small.text == "y" * 1000


def test_log_probabilities_asked_for_come_back_read(judge: JudgeClient, sim: RunningSim) -> None:
    sim.configure(judge_profiles={"small": {"error_rate": 0.3}})
    asked = replace(request(1), model="small", top_logprobs=3)
    with_logprobs, without = judge.complete_many([asked, replace(asked, top_logprobs=None)])
    assert isinstance(with_logprobs, JudgeReply) and with_logprobs.logprobs
    assert "".join(t.token for t in with_logprobs.logprobs) == with_logprobs.text
    assert all(len(t.alternatives) <= 3 for t in with_logprobs.logprobs)
    assert isinstance(without, JudgeReply) and without.logprobs is None


def test_malformed_log_probabilities_leave_the_verdict_readable() -> None:
    body = {"choices": [{"message": {"content": "4"}, "finish_reason": "stop",
                         "logprobs": {"content": [{"token": "4", "logprob": "NaN"}]}}]}
    reply = reply_from_body(json.dumps(body).encode(), latency_ms=1)
    assert reply.text == "4" and reply.logprobs is None
