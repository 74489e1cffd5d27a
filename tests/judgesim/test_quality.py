"""Judges of different quality: error rates, honest or overconfident log-probabilities."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from evalfleet.core.sample import parse_sample
from evalfleet.judgesim import (
    Fault,
    InvalidSimConfig,
    Prompt,
    RunningSim,
    SimConfig,
    build_reply,
    simulated_verdict,
)
from evalfleet.judgesim.quality import JudgeProfile, draw, wrong_value
from tests.judgesim.builders import JSON_SCHEMA, registry, rendered
from workers.judge.logprobs import read_logprobs
from workers.renderer import render_messages
from workers.verdicts import Verdict, parse_verdict
from workers.verdicts.confidence import logprob_confidences, verdict_confidence

METRICS = ("context_precision", "bbh_match", "rec_faithfulness", "rag_qa")


def prompt_of(index: int, metric: str = "context_precision") -> Prompt:
    return Prompt.from_messages(rendered(metric, id=f"s-{index}", output=f"Answer {index}."))


@pytest.mark.parametrize(("value", "wrong"), [
    (True, False), (False, True), (1, 3), (3, 5), (4, 2), (5, 3), (0.2, 0.7), (0.9, 0.4),
    (None, None), ("text", "text"),
])
def test_a_wrong_score_is_far_from_the_right_one(value: Any, wrong: Any) -> None:
    assert wrong_value(value) == pytest.approx(wrong) if isinstance(value, float) else (
        wrong_value(value) == wrong)


def test_error_rate_and_honest_confidence() -> None:
    profile = JudgeProfile(error_rate=0.2)
    draws = [draw(profile, model="small", digest=prompt_of(i).digest) for i in range(3000)]
    right = sum(d.right for d in draws) / len(draws)
    assert right == pytest.approx(0.8, abs=0.03)
    sure = [d for d in draws if d.shown >= 0.9]
    assert sum(d.right for d in sure) / len(sure) == pytest.approx(0.95, abs=0.03)
    # The same prompt, the same draw; another model draws on its own.
    again = draw(profile, model="small", digest=prompt_of(0).digest)
    assert again == draws[0]
    others = [draw(profile, model="other", digest=prompt_of(i).digest) for i in range(200)]
    assert [d.right for d in others] != [d.right for d in draws[:200]]


def test_an_overconfident_judge_says_it_is_sure_whatever_it_knows() -> None:
    profile = JudgeProfile(error_rate=0.3, logprobs="overconfident")
    draws = [draw(profile, model="small", digest=prompt_of(i).digest) for i in range(500)]
    assert all(d.shown >= 0.95 for d in draws)
    assert sum(not d.right for d in draws) > 100


def replied(prompt: Prompt, metric: str, *, profile: JudgeProfile | None,
            top: int | None = 5) -> tuple[str, Any]:
    reply = build_reply(prompt, model="small", fault=Fault.none(), profile=profile,
                        top_logprobs=top,
                        response_format=JSON_SCHEMA if metric != "rec_faithfulness" else None)
    return reply.content, reply.logprobs


@pytest.mark.parametrize("metric", METRICS)
def test_the_confidence_reader_reads_back_what_the_judge_knew(metric: str) -> None:
    profile = JudgeProfile(error_rate=0.25)
    spec = registry().get(metric)
    for index in range(20):
        record = {
            "id": f"s-{index}", "input": "What is the capital of France?",
            "output": f"Answer {index}.", "context": ["Paris is the capital of France."],
            "reference": "Paris", "fields": {"product_title": "Mug", "base_price": "10",
                                             "final_price": "8",
                                             "product_opinion_summary": "Sturdy."}}
        messages = [dict(m) for m in render_messages(spec, parse_sample(record))]
        prompt = Prompt.from_messages(messages)
        content, logprobs = replied(prompt, metric, profile=profile)
        parsed = parse_verdict(content, metric=spec, sample=parse_sample(record))
        assert isinstance(parsed, Verdict), content
        tokens = read_logprobs(logprobs)
        assert tokens is not None and "".join(t.token for t in tokens) == content
        knew = draw(profile, model="small", digest=prompt.digest)
        found = logprob_confidences(content, tokens, metric=spec, verdict=parsed)
        assert verdict_confidence(found) == pytest.approx(knew.shown)
        truth = simulated_verdict(messages, response_format=JSON_SCHEMA)
        scored = {s.source for s in spec.spec.scores.values()}
        same = all(parsed.fields[key] == truth[key] for key in scored if truth[key] is not None)
        assert same is knew.right


def test_no_logprobs_unless_asked_and_no_alternatives_with_top_zero() -> None:
    prompt = prompt_of(1)
    assert replied(prompt, "context_precision", profile=None, top=None)[1] is None
    _, logprobs = replied(prompt, "context_precision", profile=JudgeProfile(error_rate=0.5),
                          top=0)
    assert all(entry["top_logprobs"] == [] for entry in logprobs["content"])


def test_profiles_are_validated() -> None:
    with pytest.raises(InvalidSimConfig, match="error_rate"):
        SimConfig.build({"judge_profiles": {"small": {"error_rate": 0.7}}})
    with pytest.raises(InvalidSimConfig, match="logprobs"):
        SimConfig.build({"judge_profiles": {"small": {"logprobs": "sometimes"}}})


def test_logprobs_over_the_wire(judge: RunningSim) -> None:
    judge.configure(judge_profiles={"small": {"error_rate": 0.2}})
    client = openai.OpenAI(base_url=judge.base_url, api_key="x", max_retries=0, timeout=10)
    messages = rendered("bbh_match")
    completion = client.chat.completions.create(
        model="small", messages=messages, logprobs=True, top_logprobs=3)  # type: ignore[arg-type]
    choice = completion.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content
    assert "".join(t.token for t in choice.logprobs.content) == choice.message.content
    plain = client.chat.completions.create(model="small", messages=messages)  # type: ignore[arg-type]
    assert plain.choices[0].logprobs is None
    assert plain.choices[0].message.content == choice.message.content


@pytest.mark.parametrize(("options", "param"), [
    ({"logprobs": "yes"}, "logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": True}, "top_logprobs"),
    ({"top_logprobs": 3}, "top_logprobs"),
])
def test_bad_logprob_options_are_refused(judge: RunningSim, options: dict[str, Any],
                                         param: str) -> None:
    body = {"model": "small", "messages": rendered("bbh_match"), **options}
    with httpx.Client(base_url=judge.base_url, trust_env=False, timeout=10) as http:
        response = http.post("/chat/completions", content=json.dumps(body),
                             headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param
