"""The simulator's ``answered_by_prompt``: 200 replies per prompt, the chaos books' basis."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from evalfleet.judgesim import RunningSim, SimConfig, prompt_key, start_in_thread


def messages(question: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Grade the answer to: {question}"}]


@pytest.fixture(scope="module")
def running() -> Iterator[RunningSim]:
    sim = start_in_thread(SimConfig())
    try:
        yield sim
    finally:
        sim.stop()


@pytest.fixture
def judge(running: RunningSim) -> RunningSim:
    running.configure(**SimConfig().as_json())
    running.reset()
    return running


def ask(judge: RunningSim, question: str, *, timeout_s: float = 10.0) -> int:
    """POST one chat completion; its status, or 0 when the client gave up."""
    body: dict[str, Any] = {"model": "judge-sim", "messages": messages(question)}
    try:
        return httpx.post(f"{judge.base_url}/chat/completions", json=body,
                          timeout=timeout_s).status_code
    except httpx.TimeoutException:
        return 0


def answered(judge: RunningSim, question: str) -> int:
    return int(judge.stats()["answered_by_prompt"].get(prompt_key(messages(question)), 0))


def test_only_200_replies_count(judge: RunningSim) -> None:
    assert [ask(judge, "twice?"), ask(judge, "twice?")] == [200, 200]
    judge.configure(rate_limit_rate=1.0)
    assert ask(judge, "limited?") == 429
    judge.configure(rate_limit_rate=0.0, server_error_rate=1.0)
    assert ask(judge, "broken?") == 500
    assert [answered(judge, q) for q in ("twice?", "limited?", "broken?")] == [2, 0, 0]
    assert judge.stats()["by_prompt"][prompt_key(messages("broken?"))] == 1


def test_a_hang_counts_only_when_the_client_waited_for_it(judge: RunningSim) -> None:
    judge.configure(hang_rate=1.0, hang_s=30)
    assert ask(judge, "left?", timeout_s=0.3) == 0
    judge.configure(hang_s=0.2)
    assert ask(judge, "waited?") == 200
    stats = judge.stats()
    assert stats["by_outcome"]["hang"] == 2
    assert [answered(judge, q) for q in ("left?", "waited?")] == [0, 1]


def test_scripted_replies_count_by_status(judge: RunningSim) -> None:
    judge.script([{"match": "scripted", "replies": [{"status": 500}, {"content": "{}"}]}])
    assert [ask(judge, "scripted?"), ask(judge, "scripted?")] == [500, 200]
    assert answered(judge, "scripted?") == 1


def test_reset_clears_the_counts(judge: RunningSim) -> None:
    ask(judge, "before reset?")
    judge.reset()
    assert judge.stats()["answered_by_prompt"] == {}
