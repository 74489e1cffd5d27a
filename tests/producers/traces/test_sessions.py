"""Traces to conversations, with the jobs in real Redis: turns grouped by each
convention's session id, a session judged once it goes quiet, a late turn making the next
version under its own key, an end marker, the maximum age, the final wait, a dead
sweeper's lease, a session id named only by a later span, the sampling decision on the
session id, and the bounds (bad ids, interleaved sessions, too many turns, sessions or
bytes), each on the Redis buffer and the in-memory one. Time is a clock the test moves,
never a sleep."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from prometheus_client import REGISTRY

from evalfleet.cli import main
from evalfleet.core.sample import parse_sample
from evalfleet.core.session import version_id
from producers.runtime import ProducerRuntime
from producers.sampler import is_sampled
from producers.traces.assembly import TraceAssembly
from producers.traces.buffer import MemoryTraceBuffer, TraceBuffer
from producers.traces.conversation import TurnIn
from producers.traces.otlp import decode_json
from producers.traces.session_assembly import SessionAssembly
from producers.traces.sessions import (
    SESSION_LEASE_S,
    MemorySessionBuffer,
    RedisSessionBuffer,
    SessionBuffer,
    SessionTiming,
)
from producers.traces.sessions.redis import KEY_PREFIX
from producers.traces.span import SpanLimits
from tests.helpers import queued, queued_ids
from tests.producers.builders import producer_settings
from tests.producers.traces.builders import json_request, json_span
from tests.producers.traces.test_assembly import Clock

GOAL = "conversation_goal_completion"
CONFIG = f"""metrics: {{{GOAL}: {{rate: 1.0}}, rag_qa: {{rate: 1.0}}}}
traces:
  sessions:
    attribute: app.chat_id
    end: {{span_name: [conversation.end], attribute: app.conversation_ended}}
"""
IDLE_S, FINAL_S, MAX_AGE_S = 900.0, 3600.0, 86_400.0


class Ingest:
    """One ingest's assembly of traces and sessions, on the test's clock."""

    def __init__(self, runtime: ProducerRuntime, clock: Clock, traces: TraceBuffer,
                 sessions: SessionBuffer) -> None:
        pipeline = runtime.pipeline(metrics=None, rate=None, source="otlp")
        metrics = {m.name: m for m in runtime.registry}
        self.sessions = SessionAssembly(buffer=sessions, pipeline=pipeline, metrics=metrics,
                                        clock=clock)
        self.traces = TraceAssembly(buffer=traces, pipeline=pipeline, metrics=metrics,
                                    clock=clock, sessions=self.sessions)
        self.clock = clock

    def send(self, *spans: dict[str, Any]) -> None:
        decoded = decode_json(json_request(*spans), limits=SpanLimits(), max_spans=10_000)
        assert decoded.rejections == []
        assert self.traces.accept(decoded.spans) == []

    def sweep(self, after_s: float = 0.0) -> int:
        """Move the clock (traces are produced once quiet, 3 s in, as a sweeper running
        all along would), produce due traces and due sessions; the versions produced."""
        for step in (min(after_s, 3.0), max(0.0, after_s - 3.0)):
            self.clock.now_s += step
            while self.traces.sweep().traces:
                pass
        return self.sessions.sweep().sessions


@pytest.fixture(params=["redis", "memory"])
def make_ingest(request: pytest.FixtureRequest, redis_url: str, tmp_path: Path
                ) -> Iterator[Callable[..., Ingest]]:
    runtimes: list[ProducerRuntime] = []

    def make(config: str = CONFIG, clock: Clock | None = None, **settings: Any) -> Ingest:
        path = tmp_path / "sampling.yaml"
        path.write_text(config)
        runtime = ProducerRuntime(producer_settings(redis_url, tmp_path, otlp_quiet_s=3,
                                                    **settings), sampling_config=path)
        runtimes.append(runtime)
        shared = request.param == "redis"
        traces, sessions = runtime.trace_buffer(shared=shared), runtime.session_buffer(
            shared=shared)
        assert isinstance(sessions, RedisSessionBuffer if shared else MemorySessionBuffer)
        return Ingest(runtime, clock or Clock(), traces, sessions)

    yield make
    for runtime in runtimes:
        runtime.close()


def turn_spans(n: int, session: str | None, *, key: str = "gen_ai.conversation.id",
               question: str | None = None, trace_id: str | None = None,
               on_root_only: bool = False) -> list[dict[str, Any]]:
    """A chat turn: a root span and an LLM span (GenAI); the session id on both, or on the
    root only."""
    trace_id = trace_id or f"{n:032x}"
    named = {key: session} if session is not None else {}
    question = question or f"Question {n}?"
    llm = json_span(f"{n:015x}2", trace_id=trace_id, parent=f"{n:015x}1", name="chat",
                    start_ns=n * 10_000 + 1, end_ns=n * 10_000 + 5, attributes={
                        **({} if on_root_only else named),
                        "gen_ai.operation.name": "chat", "gen_ai.request.model": "m-1",
                        "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [
                            {"type": "text", "content": question}]}]),
                        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                            {"type": "text", "content": f"Answer {n}."}]}])})
    root = json_span(f"{n:015x}1", trace_id=trace_id, name="chat turn",
                     start_ns=n * 10_000, end_ns=n * 10_000 + 9, attributes=named)
    return [llm, root]


def jobs(client: redis.Redis) -> list[dict[str, Any]]:
    return [job["sample"] for job, _ in queued(client, GOAL)]


def counted(name: str, outcome: str) -> float:
    return REGISTRY.get_sample_value(name, {"outcome": outcome}) or 0.0


def turns_counted(outcome: str) -> float:
    return counted("evalfleet_producer_otlp_session_turns_total", outcome)


@pytest.mark.parametrize("key", ["gen_ai.conversation.id", "session.id",
                                 "traceloop.association.properties.session_id",
                                 "app.chat_id"])
def test_three_turns_are_judged_once_as_one_session_when_it_goes_quiet(
        make_ingest: Callable[..., Ingest], redis_client: redis.Redis, key: str) -> None:
    ingest = make_ingest()
    for n in (1, 2, 3):
        ingest.send(*turn_spans(n, "conv-1", key=key))
        assert ingest.sweep(after_s=3) == 0  # each turn kept once its trace is quiet
    assert queued_ids(redis_client, "rag_qa") == []  # rag_qa needs context: none here
    assert ingest.sweep(after_s=IDLE_S - 1) == 0
    assert ingest.sweep(after_s=1) == 1
    (sample,) = jobs(redis_client)
    trace_ids = [f"{n:032x}" for n in (1, 2, 3)]
    assert sample["id"] == version_id("conv-1", trace_ids)
    session = parse_sample(sample).session
    assert session is not None and session.closed_by == "idle"
    assert [t.input for t in session.turns] == ["Question 1?", "Question 2?", "Question 3?"]
    assert [t.output for t in session.turns] == ["Answer 1.", "Answer 2.", "Answer 3."]
    assert sample["attributes"]["app"] == "support-bot"
    assert ingest.sweep(after_s=IDLE_S) == 0  # judged once


def test_a_late_turn_makes_the_next_version_under_its_own_key(
        make_ingest: Callable[..., Ingest], redis_client: redis.Redis) -> None:
    ingest = make_ingest()
    for n in (1, 2, 3):
        ingest.send(*turn_spans(n, "conv-1"))
    assert ingest.sweep(after_s=IDLE_S + 3) == 1
    ingest.send(*turn_spans(4, "conv-1"))  # within the final wait
    assert ingest.sweep(after_s=IDLE_S + 3) == 1
    three, four = jobs(redis_client)
    assert four["id"] == version_id("conv-1", [f"{n:032x}" for n in (1, 2, 3, 4)])
    assert three["id"] != four["id"] and four["id"].startswith("conv-1#4-")
    assert len(four["session"]["turns"]) == 4
    # Nothing new past its final wait: the last version is sent once more, closed by
    # final_wait under the same id (its verdict is marked final, not judged again), and
    # the session is forgotten; no third version.
    assert ingest.sweep(after_s=FINAL_S) == 1
    final = jobs(redis_client)[-1]
    assert final["id"] == four["id"] and final["session"]["closed_by"] == "final_wait"
    assert final["session"]["turns"] == four["session"]["turns"]
    assert ingest.sweep() == 0
    assert len(jobs(redis_client)) == 3
    assert ingest.sessions.buffer.open_sessions() == 0


def test_a_final_version_is_sent_once_and_not_for_a_session_already_final(
        make_ingest: Callable[..., Ingest], redis_client: redis.Redis) -> None:
    ingest = make_ingest()
    ingest.send(*turn_spans(1, "conv-idle"), *turn_spans(2, "conv-ended"))
    assert ingest.sweep(after_s=IDLE_S + 3) == 2
    # An end marker with nothing new closes the idle version's turns again, at once.
    ingest.send(json_span("e000000000000001", trace_id="e" * 32, name="conversation.end",
                          attributes={"gen_ai.conversation.id": "conv-ended"}))
    assert ingest.sweep(after_s=3) == 1
    idle_one, idle_two, ended = jobs(redis_client)
    by_id = {idle_one["session"]["id"]: idle_one, idle_two["session"]["id"]: idle_two}
    assert ended["id"] == by_id["conv-ended"]["id"]
    assert ended["session"]["closed_by"] == "end"
    # Past the final wait: only the session still idle is sent again; both forgotten.
    assert ingest.sweep(after_s=FINAL_S) == 1
    final = jobs(redis_client)[-1]
    assert (final["id"], final["session"]["closed_by"]) == (by_id["conv-idle"]["id"],
                                                            "final_wait")
    assert ingest.sweep() == 0
    assert ingest.sessions.buffer.open_sessions() == 0


def test_two_sets_of_turns_of_one_length_never_share_a_key(
        make_ingest: Callable[..., Ingest], redis_client: redis.Redis) -> None:
    ingest = make_ingest()
    ingest.send(*turn_spans(1, "conv-a"), *turn_spans(2, "conv-a"))
    ingest.send(*turn_spans(3, "conv-b"), *turn_spans(4, "conv-b"))
    assert ingest.sweep(after_s=IDLE_S + 3) == 2
    ids = {s["id"] for s in jobs(redis_client)}
    assert {i.split("#")[1][:2] for i in ids} == {"2-"} and len(ids) == 2


def test_an_end_marker_closes_a_session_at_once(
        make_ingest: Callable[..., Ingest], redis_client: redis.Redis) -> None:
    ingest = make_ingest()
    ingest.send(*turn_spans(1, "conv-1"), *turn_spans(2, "conv-1"))
    # A trace of its own that gives no turn: only a span named as the config's marker.
    ingest.send(json_span("e000000000000001", trace_id="e" * 32, name="conversation.end",
                          attributes={"gen_ai.conversation.id": "conv-1"}))
    assert ingest.sweep(after_s=3) == 1
    (sample,) = jobs(redis_client)
    assert sample["session"]["closed_by"] == "end" and len(sample["session"]["turns"]) == 2
    # An attribute marker on a turn closes the session with that turn.
    spans = turn_spans(3, "conv-2")
    spans[1]["attributes"].append({"key": "app.conversation_ended",
                                   "value": {"boolValue": True}})
    ingest.send(*spans)
    assert ingest.sweep(after_s=3) == 1
    assert jobs(redis_client)[-1]["session"]["closed_by"] == "end"


def test_a_session_is_judged_at_its_maximum_age_while_it_still_talks(
        make_ingest: Callable[..., Ingest], redis_client: redis.Redis) -> None:
    ingest = make_ingest(otlp_session_max_age_s=3600, otlp_session_idle_s=900)
    produced = 0
    for n in range(1, 9):  # a turn every 10 minutes: never idle for 15
        ingest.send(*turn_spans(n, "conv-1"))
        produced += ingest.sweep(after_s=600)
    assert produced == 1
    assert jobs(redis_client)[0]["session"]["closed_by"] == "max_age"


def test_a_session_named_only_by_a_span_sent_later_still_groups_its_turns(
        make_ingest: Callable[..., Ingest], redis_client: redis.Redis) -> None:
    ingest = make_ingest()
    for n in (1, 2):
        llm, root = turn_spans(n, "conv-late", key="session.id", on_root_only=True)
        ingest.send(llm)  # the exporter sends the child first, without the session id
        ingest.sweep(after_s=1)
        ingest.send(root)
    assert ingest.sweep(after_s=IDLE_S + 3) == 1
    (sample,) = jobs(redis_client)
    assert sample["session"]["id"] == "conv-late" and len(sample["session"]["turns"]) == 2


def test_the_sampling_decision_is_taken_on_the_session_id(
        make_ingest: Callable[..., Ingest], redis_client: redis.Redis) -> None:
    ingest = make_ingest(f"metrics: {{{GOAL}: {{rate: 0.5}}}}\n")
    names = [f"conv-{n}" for n in range(40)]
    kept = [s for s in names if is_sampled(s, 0.5, metric=GOAL)]
    assert 0 < len(kept) < len(names)
    for k, name in enumerate(names):
        ingest.send(*turn_spans(2 * k + 1, name), *turn_spans(2 * k + 2, name))
    ingest.sweep(after_s=IDLE_S + 3)
    samples = jobs(redis_client)
    assert sorted(s["session"]["id"] for s in samples) == sorted(kept)
    assert all(len(s["session"]["turns"]) == 2 for s in samples)  # every turn of each


def test_a_sweeper_that_dies_leaves_its_sessions_to_the_next_and_one_job_each(
        make_ingest: Callable[..., Ingest], redis_client: redis.Redis) -> None:
    clock = Clock()
    ingest = make_ingest(clock=clock)
    ingest.send(*turn_spans(1, "conv-1"), *turn_spans(2, "conv-1"))
    ingest.sweep(after_s=3)
    clock.now_s += IDLE_S
    claimed, _ = ingest.sessions.buffer.claim_due(now_s=clock.now_s, limit=10)
    assert [c.session_id for c in claimed] == ["conv-1"]  # then the claimer dies
    assert ingest.sweep(after_s=SESSION_LEASE_S - 1) == 0
    assert ingest.sweep(after_s=1) == 1  # claimed again once the lease ends, produced
    assert ingest.sweep(after_s=SESSION_LEASE_S) == 0
    assert len(jobs(redis_client)) == 1


def test_bad_session_ids_are_counted_and_the_rest_goes_on(
        make_ingest: Callable[..., Ingest], redis_client: redis.Redis) -> None:
    ingest = make_ingest()
    before = turns_counted("bad_session_id"), turns_counted("no_session")
    bad = ["", "   ", "x" * 201, "conv\x00zero", "conv\nline"]
    for n, name in enumerate(bad, 1):
        ingest.send(*turn_spans(n, name))
    llm, root = turn_spans(10, None)
    ingest.send(llm, root)
    ingest.send(*turn_spans(11, "conv-ok"), *turn_spans(12, "x" * 200))
    assert ingest.sweep(after_s=IDLE_S + 3) == 2
    assert sorted(s["session"]["id"] for s in jobs(redis_client)) == ["conv-ok", "x" * 200]
    assert turns_counted("bad_session_id") - before[0] == len(bad)
    assert turns_counted("no_session") - before[1] == 1


def test_interleaved_turns_of_many_sessions_group_by_session_in_start_order(
        make_ingest: Callable[..., Ingest], redis_client: redis.Redis) -> None:
    ingest = make_ingest()
    # Turns of three sessions, each request mixing them and sending later turns first.
    order = [(9, "c"), (1, "a"), (5, "b"), (4, "a"), (2, "b"), (8, "c"), (7, "a"),
             (3, "c"), (6, "b")]
    for start in range(0, len(order), 3):
        ingest.send(*[span for n, name in order[start:start + 3]
                      for span in turn_spans(n, f"conv-{name}")])
        ingest.sweep(after_s=3)
    assert ingest.sweep(after_s=IDLE_S) == 3
    turns = {s["session"]["id"]: [t["input"] for t in s["session"]["turns"]]
             for s in jobs(redis_client)}
    assert turns == {"conv-a": ["Question 1?", "Question 4?", "Question 7?"],
                     "conv-b": ["Question 2?", "Question 5?", "Question 6?"],
                     "conv-c": ["Question 3?", "Question 8?", "Question 9?"]}


def test_turns_over_the_bounds_are_shed_and_counted(
        make_ingest: Callable[..., Ingest], redis_client: redis.Redis) -> None:
    ingest = make_ingest(otlp_max_turns_per_session=3, otlp_max_open_sessions=2,
                         otlp_max_session_bytes=4096)
    before = {r: turns_counted(r) for r in ("too_many_turns", "too_many_open_sessions",
                                             "session_too_large")}
    ingest.send(*[s for n in range(1, 6) for s in turn_spans(n, "conv-long")])
    ingest.send(*turn_spans(6, "conv-big", question="q" * 5000))  # over 4 KiB alone
    ingest.send(*turn_spans(7, "conv-two"))
    ingest.send(*turn_spans(8, "conv-three"))  # a third session while two are held
    ingest.sweep(after_s=IDLE_S + 3)
    by_id = {s["session"]["id"]: s for s in jobs(redis_client)}
    assert sorted(by_id) == ["conv-long", "conv-two"]
    assert len(by_id["conv-long"]["session"]["turns"]) == 3
    assert turns_counted("too_many_turns") - before["too_many_turns"] == 2
    assert turns_counted("session_too_large") - before["session_too_large"] == 1
    assert turns_counted("too_many_open_sessions") - before["too_many_open_sessions"] == 1


def test_a_file_of_traces_closes_every_session_at_its_end(
        make_ingest: Callable[..., Ingest], redis_client: redis.Redis) -> None:
    ingest = make_ingest()
    ingest.send(*turn_spans(1, "conv-1"), *turn_spans(2, "conv-1"))
    while ingest.traces.sweep(now_s=float("inf")).traces:
        pass
    assert ingest.sessions.sweep(now_s=float("inf")).sessions == 1
    assert len(jobs(redis_client)) == 1


def test_ten_thousand_open_sessions_stay_within_the_bound(redis_client: redis.Redis) -> None:
    """10,000 sessions of 5 turns of about 3 KB each held at once: each session is counted
    and bounded, the one past the bound is shed, and Redis holds no more than the turns'
    bytes plus a bounded overhead per session."""
    timing = SessionTiming(max_open_sessions=10_000, max_session_bytes=20_000)
    buffer = RedisSessionBuffer(redis_client, timing=timing)
    body = json.dumps({"order": 0, "turn": {"trace_id": "t", "input": "q" * 3000}})
    for turn in range(5):
        shed = buffer.add([TurnIn(f"conv-{s}", f"{s}-{turn}", body)
                           for s in range(10_000)], now_s=1.0)
        assert shed == []
    assert buffer.open_sessions() == 10_000
    assert buffer.add([TurnIn("conv-extra", "x", body)], now_s=1.0)[0].reason == (
        "too_many_open_sessions")
    used = sum(redis_client.memory_usage(key) or 0
               for key in redis_client.scan_iter(f"{KEY_PREFIX}*", count=5000))
    per_session = used / 10_000
    assert 5 * len(body) < per_session < 5 * len(body) + 1_500, per_session


def test_the_embedded_default_keeps_sessions_in_memory(tmp_path: Path) -> None:
    runtime = ProducerRuntime(producer_settings(None, tmp_path))
    try:
        buffer = runtime.trace_buffer()
        assert isinstance(buffer, MemoryTraceBuffer)
        sessions = runtime.trace_assembly(buffer, metrics=[GOAL], rate=1.0).sessions
        assert sessions is not None and isinstance(sessions.buffer, MemorySessionBuffer)
    finally:
        runtime.close()


def test_produce_reads_conversations_from_a_collector_file(
        redis_url: str, redis_client: redis.Redis, tmp_path: Path) -> None:
    (tmp_path / "sampling.yaml").write_text(CONFIG)
    settings = producer_settings(redis_url, tmp_path, sampling_config=tmp_path / "sampling.yaml")
    lines = [json_request(*turn_spans(n, f"conv-{n % 2}")) for n in range(1, 6)]
    path = tmp_path / "traces.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    result = CliRunner().invoke(main, ["produce", "--format", "otlp-json", str(path)],
                                env=settings.as_environment())
    assert result.exit_code == 0, result.output
    assert f"jobs enqueued: {GOAL} 2" in result.output
    turns = {s["session"]["id"]: len(s["session"]["turns"]) for s in jobs(redis_client)}
    assert turns == {"conv-0": 2, "conv-1": 3}
