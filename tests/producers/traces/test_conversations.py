"""Conversations end to end, as a team would run them: a chat agent built with
pydantic-ai, its model played by the judge simulator, its traces exported over OTLP/HTTP
by ``OTEL_*`` variables to ``evalfleet ingest``; a worker judges each version of each
conversation with ``conversation_goal_completion``.

The fleet's sessions go quiet after 4 s (``otlp_session_idle_s``): three turns are judged
once as one session, with the ingest SIGKILLed between two of them; a fourth turn makes a
second version under its own key; an end marker closes a session at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from evalfleet.core.metric import load_registry
from evalfleet.core.sample import parse_sample
from evalfleet.core.session import version_id
from evalfleet.judgesim import RunningSim
from tests.helpers import wait_until
from tests.producers.traces.test_end_to_end import (
    REPOSITORY,
    Fleet,
    _otel_environment,
    agent_fleet,
)
from workers.renderer import render

METRIC = "conversation_goal_completion"
CONFIG = f"""metrics: {{{METRIC}: {{rate: 1.0}}}}
traces:
  sessions:
    end: {{span_name: [conversation.end]}}
"""


@pytest.fixture(scope="module")
def fleet(postgres_url: str, redis_session_url: str, sim_session: RunningSim,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    with agent_fleet(tmp_path_factory.mktemp("conversations"), config=CONFIG, metric=METRIC,
                     postgres_url=postgres_url, redis_url=redis_session_url,
                     sim=sim_session, otlp_agent_max_wait_s=30.0, otlp_session_idle_s=4.0,
                     otlp_session_final_s=600.0) as fleet:
        yield fleet


class Chat:
    """The chat app in a subprocess, one command a line."""

    def __init__(self, fleet: Fleet) -> None:
        env = {**os.environ, **_otel_environment(fleet.url, fleet.settings),
               "OTEL_SERVICE_NAME": "travel-chat"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.producers.traces.chat_app"], cwd=REPOSITORY,
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def command(self, line: str) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{line}\n".encode())
        self.process.stdin.flush()
        out = self.process.stdout.readline()
        if not out:
            raise AssertionError(self.process.communicate(timeout=30)[1].decode()[-3000:])
        return json.loads(out)  # type: ignore[no-any-return]

    def close(self) -> None:
        self.process.communicate(b"\n", timeout=60)


def versions(fleet: Fleet, conversation: str) -> dict[str, dict[str, Any]]:
    return {key: row for key, row in fleet.verdicts().items()
            if key.startswith(f"{conversation}#")}


def test_a_conversation_is_judged_once_quiet_and_again_after_a_late_turn(
        fleet: Fleet, sim_session: RunningSim) -> None:
    chat = Chat(fleet)
    try:
        turns = [chat.command("say Weather in Oslo?")]
        fleet.kill_ingest()  # between two turns: the first turn's spans outlive it
        fleet.start_ingest()
        turns += [chat.command("say And in Bergen?"), chat.command("say Thanks, and Tromso?")]
        conversation = turns[0]["conversation_id"]
        assert conversation and {t["conversation_id"] for t in turns} == {conversation}
        three = version_id(conversation, [t["trace_id"] for t in turns])
        verdict = fleet.verdict(three)
        assert verdict["status"] == "ok" and verdict["scores"]["goal_completion"] is not None
        session = verdict["sample"]["session"]
        assert session["closed_by"] == "idle"
        assert [t["input"] for t in session["turns"]] == [
            "Weather in Oslo?", "And in Bergen?", "Thanks, and Tromso?"]
        assert [t["output"] for t in session["turns"]] == [t["answer"] for t in turns]
        # A turn keeps its tool calls, not its model calls (they repeat the conversation).
        first = session["turns"][0]["trajectory"]["steps"]
        assert [(s["type"], s["name"]) for s in first] == [("tool", "get_weather")]
        assert verdict["attributes"]["app"] == "travel-chat"
        # The judge saw the conversation turn by turn.
        messages = render(load_registry().get(METRIC), parse_sample(
            {"id": three, **verdict["sample"]})).messages
        assert "Turn 3 of 3" in messages[0]["content"]
        assert sim_session.requests_for(messages) == 1
        # A late turn: the next version, under its own key; the first stays as it was.
        turns.append(chat.command("say One more: Oslo tomorrow?"))
        four = version_id(conversation, [t["trace_id"] for t in turns])
        assert four != three
        assert len(fleet.verdict(four)["sample"]["session"]["turns"]) == 4
        assert set(versions(fleet, conversation)) == {three, four}
    finally:
        chat.close()


def test_an_end_marker_closes_a_conversation_at_once(fleet: Fleet) -> None:
    chat = Chat(fleet)
    try:
        turn = chat.command("say Weather in Lisbon?")
        conversation = turn["conversation_id"]
        assert chat.command("end") == {"ended": conversation}
        verdict = fleet.verdict(version_id(conversation, [turn["trace_id"]]))
        assert verdict["sample"]["session"]["closed_by"] == "end"
        wait_until(lambda: len(versions(fleet, conversation)) == 1, timeout_s=10,
                   what="one version")
    finally:
        chat.close()
