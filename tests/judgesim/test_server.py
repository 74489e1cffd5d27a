"""The simulator app over real HTTP: httpx and the real openai client against it."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest

from evalfleet.judgesim import (
    RunningSim,
    prompt_key,
    simulated_scores,
    simulated_verdict,
)
from testkit.process import wait_until

RAG_PROMPT = (
    "### Task\nYou are an expert judge.\n- **User Question**: {question}\n"
    "- **Reference Answer**: {reference}\n- **Generated Answer**: {answer}\n"
    "4. **Semantic Similarity**: closeness. Set \"evaluation_status\" to \"failed\" on failure."
)
JSON_SCHEMA = {"type": "json_schema", "json_schema": {"name": "verdict", "schema": {
    "type": "object", "properties": {"score": {"type": "number", "minimum": 0, "maximum": 1},
                                     "label": {"type": "string", "enum": ["pass", "fail"]}},
    "required": ["score", "label"], "additionalProperties": False}}}


def rag(question: str = "Capital of France?", reference: str = "Paris",
        answer: str = "Paris.") -> list[dict[str, Any]]:
    content = RAG_PROMPT.format(question=question, reference=reference, answer=answer)
    return [{"role": "user", "content": content}]


@pytest.fixture
def http(judge: RunningSim) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=judge.base_url, trust_env=False, timeout=10) as client:
        yield client


def llm(judge: RunningSim, *, timeout_s: float = 10.0) -> openai.OpenAI:
    return openai.OpenAI(base_url=judge.base_url, api_key="x", max_retries=0, timeout=timeout_s)


def complete(judge: RunningSim, messages: list[dict[str, Any]], **options: Any) -> Any:
    return llm(judge).chat.completions.create(model="judge-x", messages=messages,  # type: ignore[arg-type]
                                              **options)


def test_health_and_models(http: httpx.Client) -> None:
    assert http.get("/../healthz").json() == {"status": "ok"}
    models = http.get("/models").json()
    assert models["object"] == "list" and [m["id"] for m in models["data"]] == ["judge-sim"]


def test_rag_qa_reply_has_the_chat_completion_shape(judge: RunningSim) -> None:
    messages = rag()
    completion = complete(judge, messages, response_format=JSON_SCHEMA, temperature=0,
                          max_tokens=1024, n=3)
    assert completion.object == "chat.completion" and completion.model == "judge-x"
    assert completion.id and completion.created > 0
    (choice,) = completion.choices
    assert choice.index == 0 and choice.finish_reason == "stop"
    assert choice.message.role == "assistant"
    verdict = json.loads(choice.message.content)
    assert verdict == simulated_verdict(messages)
    assert {k: verdict[k] for k in simulated_scores(messages)} == simulated_scores(messages)
    usage = completion.usage
    assert usage.prompt_tokens == -(-len(messages[0]["content"]) // 4)
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


@pytest.mark.parametrize(("reference", "null"), [("Paris", False), ("", True), (" None ", True)])
def test_semantic_similarity_null_over_the_wire(judge: RunningSim, reference: str,
                                                null: bool) -> None:
    completion = complete(judge, rag(reference=reference), response_format={"type": "json_object"})
    verdict = json.loads(completion.choices[0].message.content)
    assert (verdict["semantic_similarity"] is None) is null


def test_text_mode_wraps_the_verdict_in_a_fence(judge: RunningSim) -> None:
    messages = [
        {"role": "system", "content": "You judge the BIG-Bench Hard (BBH) benchmark."},
        {"role": "user", "content": "ID: 77\n\nQUESTION:\nq\n\nMODEL_RESPONSE:\nSo, True.\n\n"
                                    "GROUND_TRUTH:\nTrue"},
    ]
    content = complete(judge, messages).choices[0].message.content
    prose, fenced = content.split("```json\n")
    assert prose.strip().endswith(".")
    verdict = json.loads(fenced.removesuffix("\n```"))
    assert verdict["id"] == "77" and verdict == simulated_verdict(messages)


def test_score_tag_and_schema_replies(judge: RunningSim) -> None:
    tag_messages = [{"role": "user", "content": "Rate it. Score- <score>5</score>\nSummary: ok"}]
    content = complete(judge, tag_messages).choices[0].message.content
    assert content.endswith(f"Score- <score>{simulated_scores(tag_messages)['score']}</score>")
    schema_messages = [{"role": "user", "content": "Is this answer good?"}]
    verdict = json.loads(complete(judge, schema_messages, response_format=JSON_SCHEMA)
                         .choices[0].message.content)
    assert set(verdict) == {"score", "label"} and verdict["label"] in ("pass", "fail")
    assert verdict["score"] == simulated_scores(schema_messages, response_format=JSON_SCHEMA)[
        "score"]


def test_directive_overrides_scores(judge: RunningSim) -> None:
    messages = rag(answer="Paris. [[judge-sim faithfulness=0.2 answer_relevance=0.9]]")
    verdict = json.loads(complete(judge, messages, response_format=JSON_SCHEMA)
                         .choices[0].message.content)
    assert (verdict["faithfulness"], verdict["answer_relevance"]) == (0.2, 0.9)


@pytest.mark.parametrize(("body", "param"), [
    (b"{not json", None),
    (json.dumps({"model": "m"}).encode(), "messages"),
    (json.dumps({"model": "m", "messages": []}).encode(), "messages"),
    (json.dumps({"model": "m", "messages": rag(), "stream": True}).encode(), "stream"),
    (json.dumps({"messages": rag()}).encode(), "model"),
])
def test_bad_requests_get_openai_error_bodies(judge: RunningSim, http: httpx.Client,
                                              body: bytes, param: str | None) -> None:
    response = http.post("/chat/completions", content=body,
                         headers={"content-type": "application/json"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"] and "code" in error
    assert error["param"] == param
    assert judge.stats()["by_status"] == {"400": 1}


def test_stream_is_refused_through_the_openai_client(judge: RunningSim) -> None:
    with pytest.raises(openai.BadRequestError, match="stream"):
        complete(judge, rag(), stream=True)


def test_rate_limited_reply_has_retry_after(judge: RunningSim) -> None:
    judge.configure(rate_limit_rate=1.0, retry_after_s=3)
    with pytest.raises(openai.RateLimitError) as caught:
        complete(judge, rag())
    response = caught.value.response
    assert response.headers["retry-after"] == "3"
    assert response.headers["retry-after-ms"] == "3000"
    assert response.json()["error"]["code"] == "rate_limit_exceeded"
    assert judge.stats()["by_outcome"]["rate_limited"] == 1


def test_server_error(judge: RunningSim) -> None:
    judge.configure(server_error_rate=1.0)
    with pytest.raises(openai.InternalServerError) as caught:
        complete(judge, rag())
    assert caught.value.status_code == 500
    assert caught.value.response.json()["error"]["type"] == "server_error"


def test_truncated_reply_ends_with_length(judge: RunningSim) -> None:
    judge.configure(truncated_rate=1.0)
    choice = complete(judge, rag(), response_format=JSON_SCHEMA).choices[0]
    assert choice.finish_reason == "length"
    with pytest.raises(ValueError):
        json.loads(choice.message.content)


def test_malformed_replies_differ_from_valid_json(judge: RunningSim) -> None:
    messages = rag()
    valid = complete(judge, messages, response_format=JSON_SCHEMA).choices[0].message.content
    judge.configure(malformed_rate=1.0)
    seen = set()
    for _ in range(30):
        choice = complete(judge, messages, response_format=JSON_SCHEMA).choices[0]
        assert choice.finish_reason == "stop" and choice.message.content != valid
        with pytest.raises(ValueError):
            json.loads(choice.message.content)
        seen.add(choice.message.content)
    assert len(seen) >= 4
    assert judge.stats()["by_outcome"]["malformed"] == 30


def test_scripted_replies_are_consumed_in_order(judge: RunningSim) -> None:
    judge.script([{"match": "Capital of Spain", "then": "default", "replies": [
        {"status": 200, "content": "first", "finish_reason": "stop"},
        {"status": 429, "retry_after": 1},
        {"status": 500},
        {"content": "cut", "finish_reason": "length"},
    ]}])
    spain, france = rag(question="Capital of Spain?"), rag()
    assert complete(judge, spain).choices[0].message.content == "first"
    assert complete(judge, france).choices[0].message.content != "first"
    with pytest.raises(openai.RateLimitError) as limited:
        complete(judge, spain)
    assert limited.value.response.headers["retry-after"] == "1"
    with pytest.raises(openai.InternalServerError):
        complete(judge, spain)
    choice = complete(judge, spain).choices[0]
    assert (choice.message.content, choice.finish_reason) == ("cut", "length")
    fallback = complete(judge, spain, response_format=JSON_SCHEMA).choices[0].message.content
    assert json.loads(fallback) == simulated_verdict(spain)
    assert judge.stats()["by_outcome"]["scripted"] == 4


def test_scripted_repeat_last(judge: RunningSim) -> None:
    judge.script([{"match": "", "then": "repeat_last", "replies": [{"content": "a"},
                                                                   {"content": "b"}]}])
    contents = [complete(judge, rag()).choices[0].message.content for _ in range(4)]
    assert contents == ["a", "b", "b", "b"]


def test_stats_count_requests_statuses_and_outcomes(judge: RunningSim) -> None:
    complete(judge, rag())
    judge.configure(server_error_rate=1.0)
    for _ in range(2):
        with pytest.raises(openai.InternalServerError):
            complete(judge, rag())
    stats = judge.stats()
    assert stats["requests"] == 3 and stats["in_flight"] == 0 and stats["max_in_flight"] >= 1
    assert stats["by_status"] == {"200": 1, "500": 2}
    assert stats["by_outcome"] == {"ok": 1, "malformed": 0, "truncated": 0, "rate_limited": 0,
                                   "server_error": 2, "hang": 0, "scripted": 0,
                                   "format_refused": 0, "context_exceeded": 0,
                                   "parameter_refused": 0}
    judge.reset()
    assert judge.stats()["requests"] == 0
    assert judge.current_config().server_error_rate == 1.0  # reset keeps the config


def test_by_prompt_counts_each_prompt(judge: RunningSim) -> None:
    once, twice = rag(question="once?"), rag(question="twice?")
    for messages in (once, twice, twice):
        complete(judge, messages)
    assert judge.stats()["by_prompt"] == {prompt_key(once): 1, prompt_key(twice): 2}
    assert judge.requests_for(twice) == 2


def test_rpm_limit_answers_429_with_the_window_wait(judge: RunningSim) -> None:
    judge.configure(rpm_limit=2)
    started = time.monotonic()
    complete(judge, rag())
    complete(judge, rag())
    with pytest.raises(openai.RateLimitError) as caught:
        complete(judge, rag())
    # The rest of the minute the first request opened, in whole seconds.
    waited = time.monotonic() - started
    assert 59 - math.ceil(waited) <= int(caught.value.response.headers["retry-after"]) <= 60
    judge.configure(rpm_limit=None)
    complete(judge, rag())


def test_hang_outlasts_the_client_timeout_and_ends_when_the_client_leaves(
    judge: RunningSim,
) -> None:
    judge.configure(hang_rate=1.0, hang_s=30)
    started = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        llm(judge, timeout_s=0.3).chat.completions.create(model="m", messages=rag())  # type: ignore[arg-type]
    assert time.monotonic() - started < 30  # the client left; the hang had not ended
    wait_until(lambda: judge.stats()["in_flight"] == 0, timeout_s=25,
               what="the server to notice the client left")
    assert judge.stats()["by_outcome"]["hang"] == 1


def test_short_hang_then_answers_normally(judge: RunningSim) -> None:
    judge.configure(hang_rate=1.0, hang_s=0.3)
    started = time.monotonic()
    content = complete(judge, rag(), response_format=JSON_SCHEMA).choices[0].message.content
    assert time.monotonic() - started >= 0.3
    assert json.loads(content) == simulated_verdict(rag())


def test_latency_is_concurrent(judge: RunningSim) -> None:
    judge.configure(latency_ms=300)

    async def burst() -> list[int]:
        async with httpx.AsyncClient(base_url=judge.base_url, trust_env=False,
                                     timeout=10) as client:
            body = {"model": "m", "messages": rag()}
            responses = await asyncio.gather(*(client.post("/chat/completions", json=body)
                                               for _ in range(50)))
        return [r.status_code for r in responses]

    started = time.monotonic()
    assert asyncio.run(burst()) == [200] * 50
    assert time.monotonic() - started >= 0.3
    assert judge.stats()["max_in_flight"] == 50  # all fifty waited out their latency at once


def test_max_tokens_cuts_the_reply(judge: RunningSim) -> None:
    choice = complete(judge, rag(), max_tokens=5).choices[0]
    assert choice.finish_reason == "length" and len(choice.message.content) == 20


def test_bad_settings_scripts_and_routes_get_error_bodies(http: httpx.Client) -> None:
    bad_config = http.put("/../_sim/config", content=b"[")
    assert bad_config.status_code == 400 and bad_config.json()["error"]["code"] == "invalid_json"
    bad_script = http.post("/../_sim/script", json={"rules": [{"match": "x", "replies": []}]})
    assert bad_script.status_code == 400 and bad_script.json()["error"]["message"]
    missing = http.get("/nowhere")
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"


def test_reset_during_a_request_keeps_counters_balanced(judge: RunningSim) -> None:
    judge.configure(latency_ms=300)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(complete, judge, rag())
        # Reset while the request is inside the simulator, not before it arrives.
        deadline = time.monotonic() + 10
        while judge.stats()["in_flight"] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        judge.reset()
        assert pending.result().choices[0].finish_reason == "stop"
    stats = judge.stats()
    assert stats["in_flight"] == 0 and stats["requests"] == 0


def test_arrivals_are_counted_per_100ms(judge: RunningSim) -> None:
    before = time.time()
    for n in range(5):
        complete(judge, rag(question=f"Arrival {n}?"))
    arrivals = judge.stats()["arrivals_per_100ms"]
    assert sum(arrivals.values()) == 5
    assert all(int(before * 10) <= int(tick) <= int(time.time() * 10) for tick in arrivals)


def test_a_refused_response_format_is_answered_400_naming_it(judge: RunningSim,
                                                             http: httpx.Client) -> None:
    judge.configure(refused_response_formats=["json_schema"])
    body = {"model": "m", "messages": rag(), "response_format": JSON_SCHEMA}
    refused = http.post("/chat/completions", json=body)
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "response_format"
    assert "json_schema" in refused.json()["error"]["message"]
    json_mode = {**body, "response_format": {"type": "json_object"}}
    plain = http.post("/chat/completions", json=json_mode)
    assert plain.status_code == 200
    assert judge.stats()["by_outcome"]["format_refused"] == 1


def test_a_repeated_prefix_is_reported_as_cached_tokens(judge: RunningSim,
                                                        http: httpx.Client) -> None:
    judge.configure(prompt_cache_min_tokens=256, prompt_cache_block_tokens=64)
    fixed = "Rubric. " * 200  # 1,600 characters: 400 tokens, six whole blocks of 64
    usage = []
    for sample in ("first sample", "second sample", "third"):
        body = {"model": "m", "messages": [{"role": "system", "content": fixed},
                                           {"role": "user", "content": sample}],
                "prompt_cache_key": "evalfleet:m:v1"}
        answer = http.post("/chat/completions", json=body)
        assert answer.status_code == 200
        usage.append(answer.json()["usage"])
    # The first fills the cache; the others find the fixed text, in whole blocks.
    assert [u["prompt_tokens_details"]["cached_tokens"] for u in usage] == [0, 384, 384]
    assert all(u["prompt_tokens"] >= 400 for u in usage)
    stats = judge.stats()
    assert stats["cached_tokens"] == 768 and stats["by_prompt_cache_key"] == {
        "evalfleet:m:v1": 3}
    judge.configure(prompt_cache=False)
    plain = http.post("/chat/completions", json={"model": "m", "messages": rag()})
    assert "prompt_tokens_details" not in plain.json()["usage"]


@pytest.mark.parametrize(("style", "status", "words"), [
    ("openai", 400, "Unrecognized request argument supplied: prompt_cache_key"),
    ("llama_cpp_python", 500, "prompt_cache_key\n  Extra inputs are not permitted"),
    ("vllm", 400, "prompt_cache_key: Extra inputs are not permitted"),
])
def test_a_refused_parameter_is_answered_in_the_server_style(
    style: str, status: int, words: str, judge: RunningSim, http: httpx.Client,
) -> None:
    judge.configure(refused_parameters=["prompt_cache_key"], server_style=style)
    body = {"model": "m", "messages": rag(), "prompt_cache_key": "k"}
    refused = http.post("/chat/completions", json=body)
    error = refused.json()
    assert refused.status_code == status and words in error.get("error", error)["message"]
    del body["prompt_cache_key"]
    assert http.post("/chat/completions", json=body).status_code == 200
    assert judge.stats()["by_outcome"]["parameter_refused"] == 1
