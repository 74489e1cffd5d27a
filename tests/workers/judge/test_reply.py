"""Both judge providers read the answer body with a size cap, against the simulator."""

from __future__ import annotations

from collections.abc import Iterator

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
from workers.judge.reply import TOO_LARGE

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
