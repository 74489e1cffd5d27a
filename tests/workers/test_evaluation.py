"""The evaluator against Postgres and the judge simulator over HTTP.

Each test scripts the simulator's replies and checks what ends up stored: the
verdict, the re-ask, the retry decision or the dead letter.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from evalfleet.core.budget import budget_day
from evalfleet.core.errors import JudgeError, WorkerShuttingDown
from evalfleet.core.message import Job, new_job
from evalfleet.core.metric import load_registry
from evalfleet.core.sample import parse_sample
from evalfleet.core.spend import SpendLedger
from evalfleet.judgesim import RunningSim, simulated_scores
from evalfleet.store import SqlStore
from tests.helpers import DeferringJudge, evaluator_options, poison
from workers.batchjudge.mode import CollectingMode
from workers.evaluation import Evaluator
from workers.judge import (
    AsyncHttpJudge,
    JudgeClient,
    JudgeFleet,
    JudgeProvider,
    JudgeReply,
    JudgeRequest,
    OpenAIJudge,
)
from workers.judge.base import Answered
from workers.judge.formats import FormatSupport
from workers.renderer import render_messages
from workers.telemetry import Telemetry

SAMPLE = {"id": "req-1", "input": "How long is the refund window?",
          "output": "30 days.", "context": ["Refunds are accepted within 30 days."],
          "reference": "30 days", "attributes": {"app": "bot"}}

GOOD_RAG = ('{"faithfulness": 0.9, "context_relevance": 0.8, "answer_relevance": 1.0, '
            '"semantic_similarity": 0.7, "evaluation_status": "success", "reason": null, '
            '"error": null}')


@pytest.fixture
def formats() -> FormatSupport:
    """The response formats the judge fleet learns."""
    return FormatSupport("json_schema")


@pytest.fixture(params=["http", "openai"])
def judge(request: pytest.FixtureRequest, sim: RunningSim,
          formats: FormatSupport) -> Iterator[JudgeClient]:
    """Every evaluator test runs with both judge providers, inside the judge fleet."""
    provider: JudgeProvider
    if request.param == "http":
        provider = AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=5,
                                  max_connections=8)
    else:
        provider = OpenAIJudge(base_url=sim.base_url, api_key=None, timeout_s=5)
    client = JudgeFleet(provider, concurrency=8, formats=formats)
    yield client
    client.close()


@pytest.fixture
def evaluator(store: SqlStore, judge: JudgeClient) -> Iterator[Evaluator]:
    options = evaluator_options(judge_model="judge-sim", max_attempts=3, retry_base_s=0.5,
                               retry_max_s=10)
    yield Evaluator(registry=load_registry(), store=store, judge=judge, options=options,
                    jitter=lambda: 0.0)


def job(metric: str = "rag_qa", **changes: Any) -> Job:
    return new_job(metric, parse_sample({**SAMPLE, **changes}))


def script(sim: RunningSim, *replies: dict[str, Any]) -> None:
    sim.script([{"match": "", "replies": list(replies), "then": "repeat_last"}])


def stored(store: SqlStore) -> list[Any]:
    return list(store.iter_verdicts())


def test_a_good_reply_is_stored_with_its_scores(evaluator: Evaluator, store: SqlStore,
                                                sim: RunningSim) -> None:
    outcome = evaluator.run(job(), owner="m1")
    assert (outcome.kind, outcome.detail) == ("stored", "ok")
    (verdict,) = stored(store)
    messages = render_messages(load_registry().get("rag_qa"), parse_sample(SAMPLE))
    assert verdict.scores == simulated_scores(messages)
    assert verdict.attempts == 1 and verdict.prompt_tokens and verdict.latency_ms >= 0
    assert verdict.key.prompt_version == load_registry().get("rag_qa").version
    assert sim.requests_for(messages) == 1


def test_a_redelivered_job_does_not_call_the_judge(evaluator: Evaluator,
                                                   sim: RunningSim) -> None:
    the_job = job()
    assert evaluator.run(the_job, owner="m1").kind == "stored"
    assert evaluator.run(the_job, owner="m2").kind == "duplicate"
    assert sim.stats()["requests"] == 1


def test_a_job_held_by_another_worker_is_rechecked_later(evaluator: Evaluator,
                                                         store: SqlStore) -> None:
    the_job = job()
    key = evaluator.verdict_key(the_job, load_registry().get("rag_qa"))
    store.claim([key], owner="other", lease_s=60, now=datetime.now(UTC))
    outcome = evaluator.run(the_job, owner="m1")
    assert outcome.kind == "retry" and outcome.retry_job == the_job
    assert 0 < outcome.countdown_s <= 5


def test_an_unusable_reply_is_reasked_once_with_the_problem(evaluator: Evaluator,
                                                            store: SqlStore,
                                                            sim: RunningSim) -> None:
    script(sim, {"status": 200, "content": '{"faithfulness": 1.7}'},
           {"status": 200, "content": GOOD_RAG})
    assert evaluator.run(job(), owner="m1").detail == "ok"
    (verdict,) = stored(store)
    assert verdict.scores == {"faithfulness": 0.9, "context_relevance": 0.8,
                              "answer_relevance": 1.0, "semantic_similarity": 0.7}
    assert verdict.attempts == 2
    assert sim.stats()["requests"] == 2


def test_an_off_spec_annotation_is_kept_with_a_note_and_never_reasked(
    evaluator: Evaluator, store: SqlStore, sim: RunningSim,
) -> None:
    script(sim, {"status": 200, "content": GOOD_RAG.replace('"reason": null', '"reason": 7')})
    assert evaluator.run(job(), owner="m1").detail == "ok"
    (verdict,) = stored(store)
    assert verdict.scores["faithfulness"] == 0.9
    assert verdict.notes == ["field 'reason': expected a string, got a number 7"]
    assert verdict.attempts == 1
    assert sim.stats()["requests"] == 1


def test_the_judge_identity_it_reports_is_kept(evaluator: Evaluator, store: SqlStore) -> None:
    evaluator.run(job(), owner="m1")
    (verdict,) = stored(store)
    # The simulator answers as the model it was asked for, with its own fingerprint.
    assert verdict.judge_reported_model == verdict.key.judge_model == "judge-sim"
    assert verdict.judge_fingerprint == "judge-sim"
    assert verdict.notes == []


def test_two_unusable_replies_make_a_failed_verdict_with_the_raw_output(
    evaluator: Evaluator, store: SqlStore, sim: RunningSim,
) -> None:
    script(sim, {"status": 200, "content": "I think it is fine."},
           {"status": 200, "content": '{"faithfulness": 0.9, "context_rel',
            "finish_reason": "length"})
    assert evaluator.run(job(), owner="m1").detail == "failed"
    (verdict,) = stored(store)
    assert verdict.status == "failed" and verdict.error_class == "truncated"
    assert "first reply" in (verdict.error or "")
    assert verdict.raw_output == '{"faithfulness": 0.9, "context_rel'
    assert verdict.scores == dict.fromkeys(verdict.scores)  # every score null, none guessed
    assert sim.stats()["requests"] == 2


def test_a_judge_declared_failure_is_a_verdict(evaluator: Evaluator, store: SqlStore,
                                               sim: RunningSim) -> None:
    script(sim, {"status": 200, "content": (
        '{"faithfulness": null, "context_relevance": null, "answer_relevance": null, '
        '"semantic_similarity": null, "evaluation_status": "failed", '
        '"reason": "Input parsing error: missing user question.", "error": null}')})
    assert evaluator.run(job(), owner="m1").detail == "failed"
    (verdict,) = stored(store)
    assert verdict.error_class == "judge_declared"
    assert "missing user question" in (verdict.reason or "")
    assert sim.stats()["requests"] == 1  # a valid verdict: no re-ask


def test_rate_limited_job_is_retried_after_retry_after(evaluator: Evaluator, store: SqlStore,
                                                       sim: RunningSim) -> None:
    script(sim, {"status": 429, "retry_after": 4})
    the_job = job()
    outcome = evaluator.run(the_job, owner="m1")
    assert outcome.kind == "retry"
    assert outcome.countdown_s == pytest.approx(4.0)
    assert outcome.retry_job is not None and outcome.retry_job.attempt == 2
    assert stored(store) == []
    # The claim was released: the retry (another message) can take the key at once.
    script(sim, {"status": 200, "content": GOOD_RAG})
    assert evaluator.run(outcome.retry_job, owner="m2").detail == "ok"
    (verdict,) = stored(store)
    assert verdict.attempts == 2


def test_server_errors_back_off_exponentially_then_dead_letter(evaluator: Evaluator,
                                                               store: SqlStore,
                                                               sim: RunningSim) -> None:
    script(sim, {"status": 500})
    current, countdowns = job(), []
    for _ in range(2):
        outcome = evaluator.run(current, owner=f"m{current.attempt}")
        assert outcome.kind == "retry" and outcome.retry_job is not None
        countdowns.append(outcome.countdown_s)
        current = outcome.retry_job
    assert countdowns == [0.25, 0.5]  # base 0.5 s, doubled, lower half of the jitter
    outcome = evaluator.run(current, owner="m3")
    assert (outcome.kind, outcome.detail) == ("dead_letter", "judge_unavailable")
    (letter,) = store.iter_dead_letters()
    assert letter.attempts == 3 and letter.payload["sample"]["id"] == "req-1"
    assert "gave up after 3 attempts" in letter.error
    assert stored(store) == []


@pytest.mark.parametrize(("refused", "style", "final_mode", "sent"), [
    # OpenAI-style 400s: json_schema, then JSON mode with the schema (also json_object).
    (["json_schema"], "openai", "json_object_schema", 2),
    (["json_schema", "json_object"], "openai", "text", 4),
    # llama-cpp-python refuses json_schema with a 500 naming response_format.type.
    (["json_schema"], "llama_cpp_python", "json_object_schema", 2),
])
def test_a_refused_response_format_steps_down_and_loses_no_job(
    refused: list[str], style: str, final_mode: str, sent: int, evaluator: Evaluator,
    store: SqlStore, sim: RunningSim, formats: FormatSupport,
) -> None:
    sim.configure(refused_response_formats=refused, server_style=style)
    outcome = evaluator.run(job(), owner="m1")
    assert outcome.kind == "stored"  # stepped down within the call: no retry, no attempt
    assert formats.mode_for("judge-sim") == final_mode
    (verdict,) = stored(store)
    assert verdict.status == "ok" and verdict.attempts == 1
    assert list(store.iter_dead_letters()) == []
    assert sim.stats()["requests"] == sent
    # Later jobs go straight to the mode that works.
    evaluator.run(job(id="req-2"), owner="m9")
    assert sim.stats()["requests"] == sent + 1
    assert len(stored(store)) == 2


@pytest.mark.parametrize("style", ["openai", "llama_cpp_python", "llama_cpp", "vllm"])
def test_a_prompt_longer_than_the_context_is_a_named_failed_verdict(
    style: str, evaluator: Evaluator, store: SqlStore, sim: RunningSim,
    formats: FormatSupport,
) -> None:
    sim.configure(context_tokens=50, server_style=style)
    outcome = evaluator.run(job(), owner="m1")
    assert (outcome.kind, outcome.detail) == ("stored", "failed")  # never a retry
    (verdict,) = stored(store)
    assert verdict.error_class == "context_length_exceeded"
    assert "longer than the judge's context" in (verdict.error or "")
    assert verdict.scores == dict.fromkeys(verdict.scores) and verdict.attempts == 1
    assert sim.stats()["requests"] == 1 and formats.mode_for("judge-sim") == "json_schema"


def test_a_plain_bad_request_is_not_a_format_refusal(evaluator: Evaluator, store: SqlStore,
                                                     sim: RunningSim,
                                                     formats: FormatSupport) -> None:
    script(sim, {"status": 400, "message": "unknown parameter 'seed'"})
    outcome = evaluator.run(job(), owner="m1")
    assert (outcome.kind, outcome.detail) == ("dead_letter", "judge_rejected")
    assert formats.mode_for("judge-sim") == "json_schema"


@pytest.mark.parametrize("status", [400, 404, 422])
def test_rejections_become_dead_letters_at_once(status: int, evaluator: Evaluator,
                                                store: SqlStore, sim: RunningSim) -> None:
    script(sim, {"status": status})
    outcome = evaluator.run(job(), owner="m1")
    assert (outcome.kind, outcome.detail) == ("dead_letter", "judge_rejected")
    (letter,) = store.iter_dead_letters()
    assert str(status) in letter.error
    assert sim.stats()["requests"] == 1


def test_a_batch_is_judged_together_and_stored_once(evaluator: Evaluator, store: SqlStore,
                                                    sim: RunningSim) -> None:
    jobs = [job(id=f"req-{n}") for n in range(10)]
    assert evaluator.run(jobs[3], owner="earlier").kind == "stored"
    outcomes = evaluator.run_batch([*jobs, jobs[5]], owner="m1")
    kinds = [outcome.kind for outcome in outcomes]
    assert kinds == ["stored"] * 3 + ["duplicate"] + ["stored"] * 6 + ["duplicate"]
    assert store.counts().verdicts == 10
    assert sim.stats()["requests"] == 10


def test_one_bad_job_does_not_hold_back_its_batch(evaluator: Evaluator, store: SqlStore,
                                                  sim: RunningSim) -> None:
    sim.script([{"match": "Refunds take 9 days", "replies": [{"status": 503}],
                 "then": "repeat_last"}])
    jobs = [job(id="a"), job(id="b", context=["Refunds take 9 days."]),
            job("rec_faithfulness", id="c"), job(id="d")]
    kinds = [o.kind for o in evaluator.run_batch(jobs, owner="m1")]
    assert kinds == ["stored", "retry", "dead_letter", "stored"]
    assert store.counts().verdicts == 2 and store.counts().dead_letters == 1


@pytest.mark.parametrize("step", ["parse_verdict", "_judgement"])
def test_a_job_whose_parse_or_conclusion_raises_costs_that_job_alone(
        step: str, evaluator: Evaluator, store: SqlStore,
        monkeypatch: pytest.MonkeyPatch) -> None:
    poison(monkeypatch, step, sample_id="b", error=KeyError("poisoned"))
    outcomes = evaluator.deliver([job(id="a"), job(id="b"), job(id="c")], owner="m1")
    assert [o.kind for o in outcomes] == ["stored", "dead_letter", "stored"]
    assert {v.key.sample_id for v in stored(store)} == {"a", "c"}
    (letter,) = store.iter_dead_letters()
    assert (letter.sample_id, letter.error_class) == ("b", "internal_error")
    assert "KeyError" in letter.error and letter.verdict_key is not None
    # Kept under its verdict key: a redelivered copy is not judged again.
    assert evaluator.run(job(id="b"), owner="m2").kind == "duplicate"


@pytest.mark.parametrize("reply", [
    {"status": 401}, {"status": 403},
    {"status": 429, "code": "insufficient_quota", "message": "You exceeded your quota."},
])
def test_access_problems_pause_instead_of_dead_lettering(
    reply: dict[str, Any], evaluator: Evaluator, store: SqlStore, sim: RunningSim,
) -> None:
    script(sim, reply)
    the_job = job()
    outcome = evaluator.run(the_job, owner="m1")
    assert outcome.kind == "paused" and outcome.retry_job == the_job
    assert store.counts().dead_letters == 0 and store.counts().verdicts == 0
    # The claim was released, so the job can run as soon as access is back.
    sim.reset()
    assert evaluator.run(the_job, owner="m2").kind == "stored"


def test_verdicts_are_costed_and_counted_against_the_day(
    store: SqlStore, judge: JudgeClient, redis_url: str,
) -> None:
    ledger = SpendLedger(redis_url)
    options = evaluator_options(judge_model="judge-sim",
                               model_prices={"judge-sim": (1.0, 2.0)})
    evaluator = Evaluator(registry=load_registry(), store=store, judge=judge, options=options,
                          spend=ledger)
    evaluator.run_batch([job(id="a"), job(id="b")], owner="m1")
    verdicts = stored(store)
    expected = [(v.prompt_tokens * 1.0 + v.completion_tokens * 2.0) / 1e6 for v in verdicts]
    assert [v.cost_usd for v in verdicts] == pytest.approx(expected)
    assert ledger.spent("rag_qa", day=budget_day()) == pytest.approx(sum(expected))
    ledger.close()


def test_cached_tokens_are_kept_summed_over_a_reask_and_priced_in_batch_mode(
    store: SqlStore, judge: JudgeClient, sim: RunningSim,
) -> None:
    # Blocks of 16 tokens from the first: rag_qa's fixed text ahead of the sample is short.
    sim.configure(prompt_cache_min_tokens=0, prompt_cache_block_tokens=16)
    sim.script([{"match": "Reasked sample", "replies": [{"content": "no verdict here"}]}])
    prices = {"judge-sim": {"input": 1.0, "cached_input": 0.1, "output": 2.0, "batch": 0.4}}
    options = evaluator_options(judge_model="judge-sim", model_prices=prices)
    evaluator = Evaluator(registry=load_registry(), store=store, judge=judge, options=options,
                          batch=CollectingMode(reask_in_batch=False))
    for sample_id, question in (("a", None), ("b", None), ("c", "Reasked sample?")):
        changes = {"id": sample_id, **({"input": question} if question else {})}
        assert evaluator.run(job(**changes), owner="m1").kind == "stored"
    verdicts = {v.key.sample_id: v for v in stored(store)}
    assert verdicts["a"].cached_tokens == 0  # the first of its metric
    assert verdicts["b"].cached_tokens and verdicts["b"].cached_tokens % 16 == 0
    # The re-ask repeats the whole first prompt: its cached tokens add to the first call's.
    reasked = verdicts["c"]
    assert reasked.attempts == 2 and reasked.cached_tokens > verdicts["b"].cached_tokens
    for verdict in verdicts.values():
        cached = verdict.cached_tokens
        expected = ((verdict.prompt_tokens - cached) * 1.0 + cached * 0.1
                    + verdict.completion_tokens * 2.0) / 1e6 * 0.4
        assert verdict.judge_mode == "batch" and verdict.cost_usd == pytest.approx(expected)


def test_verdicts_and_judge_failures_are_counted(store: SqlStore, judge: JudgeClient,
                                                 sim: RunningSim) -> None:
    registry = CollectorRegistry()
    telemetry = Telemetry(registry=registry, segment_keys=["app"], max_segment_values=10)
    evaluator = Evaluator(registry=load_registry(), store=store, judge=judge,
                          options=evaluator_options(judge_model="judge-sim"), telemetry=telemetry)
    sim.script([{"match": "Refunds take 9 days", "replies": [{"status": 503}],
                 "then": "repeat_last"}])
    evaluator.run_batch([job(id="a"), job(id="b"), job(id="c", context=["Refunds take 9 days."])],
                        owner="m1")
    value = registry.get_sample_value
    assert value("evalfleet_verdicts_total", {"metric": "rag_qa", "status": "ok",
                                             "error_class": "", "app": "bot"}) == 2
    assert value("evalfleet_judge_errors_total", {"metric": "rag_qa",
                                                  "error_class": "judge_unavailable"}) == 1
    assert (value("evalfleet_judge_tokens_total", {"metric": "rag_qa", "model": "judge-sim",
                                                   "kind": "prompt"}) or 0) > 0


def test_a_change_of_judge_identity_is_counted_once(store: SqlStore, judge: JudgeClient,
                                                    sim: RunningSim) -> None:
    registry = CollectorRegistry()
    evaluator = Evaluator(registry=load_registry(), store=store, judge=judge,
                          options=evaluator_options(judge_model="judge-sim"),
                          telemetry=Telemetry(registry=registry))
    evaluator.run_batch([job(id="a"), job(id="b")], owner="m1")
    sim.configure(system_fingerprint="fp-2026-11-25")
    evaluator.run_batch([job(id="c"), job(id="d")], owner="m2")
    changes = registry.get_sample_value("evalfleet_judge_identity_changes_total",
                                        {"model": "judge-sim"})
    assert changes == 1
    assert {v.judge_fingerprint for v in stored(store)} == {"judge-sim", "fp-2026-11-25"}


def test_unknown_metric_becomes_a_dead_letter(evaluator: Evaluator, store: SqlStore) -> None:
    assert evaluator.run(job("retired_metric"), owner="m1").detail == "unknown_metric"
    (letter,) = store.iter_dead_letters()
    assert letter.metric == "retired_metric"


def test_a_sample_missing_a_required_input_becomes_a_dead_letter(
    evaluator: Evaluator, store: SqlStore, sim: RunningSim,
) -> None:
    assert evaluator.run(job("rec_faithfulness"), owner="m1").detail == "invalid_sample"
    (letter,) = store.iter_dead_letters()
    assert "fields.product_title" in letter.error
    assert sim.stats()["requests"] == 0


def test_per_metric_judge_model_keys_the_verdict(store: SqlStore, judge: JudgeClient) -> None:
    options = evaluator_options(judge_model="judge-a", judge_models={"rag_qa": "judge-b"})
    evaluator = Evaluator(registry=load_registry(), store=store, judge=judge, options=options)
    evaluator.run(job(), owner="m1")
    (verdict,) = stored(store)
    assert verdict.key.judge_model == "judge-b"


@pytest.mark.parametrize(("wait_s", "pause_s"), [(1.5, 1.5), (900.0, 300.0)])
def test_a_deferred_call_pauses_the_queue_without_spending_an_attempt(
    wait_s: float, pause_s: float, store: SqlStore,
) -> None:
    evaluator = Evaluator(registry=load_registry(), store=store, judge=DeferringJudge(wait_s),
                          options=evaluator_options(judge_model="judge-sim", retry_max_s=300.0))
    the_job = job()
    outcome = evaluator.run(the_job, owner="m1")
    assert outcome.kind == "paused" and outcome.retry_job == the_job  # attempt unchanged
    assert outcome.pause_s == pause_s  # never past the longest backoff
    assert store.counts().dead_letters == 0 and store.counts().verdicts == 0
    # The claim was released: another worker may take the job at once.
    assert evaluator.run(the_job, owner="m2").kind == "paused"


@pytest.mark.parametrize("keep", [True, False])
def test_the_verdict_keeps_the_sample_it_judged(store: SqlStore, judge: JudgeClient,
                                                sim: RunningSim, keep: bool) -> None:
    script(sim, {"content": GOOD_RAG})
    options = evaluator_options(judge_model="judge-sim", keep_samples=keep)
    evaluator = Evaluator(registry=load_registry(), store=store, judge=judge, options=options)
    hostile = "<script>alert(1)</script> {{ x }} [EMAIL]"
    evaluator.run(job(output=hostile, fields={"evaluation_goal": "balanced"}), owner="m1")
    (verdict,) = store.iter_verdicts(with_samples=True)
    if not keep:
        assert verdict.sample is None
        return
    assert verdict.sample == {
        "input": SAMPLE["input"], "output": hostile, "context": SAMPLE["context"],
        "reference": SAMPLE["reference"], "fields": {"evaluation_goal": "balanced"}}
    (plain,) = store.iter_verdicts()
    assert plain.sample is None  # read only when asked for


class _OneByOne(JudgeClient):
    """Hands the answers of ``judge`` over one at a time, noting the verdicts stored when
    each is taken; raises ``stop`` once ``stop_after`` answers were taken."""

    def __init__(self, judge: JudgeClient, store: SqlStore, *, stop_after: int | None = None,
                 stop: Exception | None = None) -> None:
        self.judge, self.store = judge, store
        self.stop_after, self.stop = stop_after, stop
        self.stored_when_taken: list[int] = []

    def complete_many(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply | JudgeError]:
        return self.judge.complete_many(requests)

    def answers(self, requests: Sequence[JudgeRequest], *,
                gather_s: float = 0.0) -> Iterator[list[Answered]]:
        for chunk in self.judge.answers(requests):
            for answered in chunk:
                if len(self.stored_when_taken) == self.stop_after and self.stop is not None:
                    raise self.stop
                self.stored_when_taken.append(self.store.counts().verdicts)
                yield [answered]


def test_each_verdict_is_stored_before_the_next_answer_is_taken(
    store: SqlStore, judge: JudgeClient, sim: RunningSim,
) -> None:
    one_by_one = _OneByOne(judge, store)
    evaluator = Evaluator(registry=load_registry(), store=store, judge=one_by_one,
                          options=evaluator_options(judge_model="judge-sim"))
    outcomes = evaluator.run_batch([job(id=f"req-{n}") for n in range(4)], owner="m1")
    assert [outcome.kind for outcome in outcomes] == ["stored"] * 4
    assert one_by_one.stored_when_taken == [0, 1, 2, 3]
    assert store.counts().verdicts == 4


def test_a_batch_stopped_midway_keeps_its_stored_verdicts_and_judges_only_the_rest(
    store: SqlStore, judge: JudgeClient, sim: RunningSim,
) -> None:
    jobs = [job(id=f"req-{n}") for n in range(5)]
    stopping = _OneByOne(judge, store, stop_after=2, stop=WorkerShuttingDown("deadline"))
    options = evaluator_options(judge_model="judge-sim")
    with pytest.raises(WorkerShuttingDown):
        Evaluator(registry=load_registry(), store=store, judge=stopping,
                  options=options).run_batch(jobs, owner="m1")
    assert store.counts().verdicts == 2
    # The message comes back under the same id: the two stored verdicts are found at
    # the claim, the other three judged.
    again = Evaluator(registry=load_registry(), store=store, judge=judge,
                      options=options).run_batch(jobs, owner="m1")
    assert sorted(outcome.kind for outcome in again) == ["duplicate"] * 2 + ["stored"] * 3
    assert store.counts().verdicts == 5
    # Both providers send all five at once from the fleet's loop.
    assert sim.stats()["requests"] == 5 + 3
