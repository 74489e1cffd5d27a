"""The sampling config: format, validation errors, layering of values."""

from __future__ import annotations

import pytest

from evalfleet.core.errors import InvalidSamplingConfig
from evalfleet.core.settings import Settings
from producers.policy import Fallbacks, max_delay_for, parse_policy
from tests.producers.builders import policy

FULL = """
defaults: {rate: 0.2, minimum_per_segment: 5, max_queue_depth: 1000}
segments: {by: [app, route], window_s: 600, max_tracked: 50}
metrics:
  rag_qa:
    rate: 0.05
    where: {app: support-bot, route: [/chat, /ask], model: {regex: "gpt-4.*"}}
    delay_s: 30
    shed_policy: lower_rate
  bbh_match: {}
redaction: {kinds: [email], patterns: {employee_id: 'EMP-\\d{6}'}}
"""


def test_values_resolve_per_call_then_metric_then_defaults_then_settings() -> None:
    loaded = policy(FULL, rate=0.9, max_queue_depth=7, shed_policy="drop_new")
    rag = loaded.rule_for("rag_qa")
    assert (rag.rate, rag.minimum_per_segment, rag.delay_s) == (0.05, 5, 30.0)
    assert (rag.max_queue_depth, rag.shed_policy) == (1000, "lower_rate")
    bbh = loaded.rule_for("bbh_match")
    assert (bbh.rate, bbh.delay_s, bbh.shed_policy) == (0.2, 0.0, "drop_new")
    assert loaded.rule_for("rag_qa", rate=0.5).rate == 0.5
    bare = policy("metrics: {rag_qa: {}}", rate=0.9, max_queue_depth=7)
    assert (bare.rule_for("rag_qa").rate, bare.rule_for("rag_qa").max_queue_depth) == (0.9, 7)
    assert loaded.metric_names == ["rag_qa", "bbh_match"]
    assert loaded.segment_keys == ("app", "route")


def test_no_file_means_the_fallbacks() -> None:
    rule = policy(rate=0.3).rule_for("anything")
    assert (rule.rate, rule.where, rule.minimum_per_segment) == (0.3, {}, 0)
    assert policy(max_queue_depth=0).rule_for("x").max_queue_depth is None  # 0: no limit


@pytest.mark.parametrize(("attributes", "matches"), [
    ({"app": "support-bot", "route": "/chat", "model": "gpt-4o"}, True),
    ({"app": "support-bot", "route": "/ask", "model": "gpt-4"}, True),
    ({"app": "hr", "route": "/chat", "model": "gpt-4o"}, False),         # equality
    ({"app": "support-bot", "route": "/x", "model": "gpt-4o"}, False),   # membership
    ({"app": "support-bot", "route": "/chat", "model": "o-gpt-4"}, False),  # regex, anchored
    ({"app": "support-bot", "route": "/chat"}, False),                   # missing key
])
def test_filters(attributes: dict[str, str], matches: bool) -> None:
    assert policy(FULL).rule_for("rag_qa").matches(attributes) is matches


def test_condition_forms() -> None:
    loaded = policy("""
metrics:
  m: {where: {a: {equals: x}, b: {in: [y, z]}, c: 5, d: [1, 2]}}
""")
    rule = loaded.rule_for("m")
    assert rule.matches({"a": "x", "b": "z", "c": "5", "d": "2"})
    assert not rule.matches({"a": "x", "b": "z", "c": "5", "d": "3"})


def test_a_metric_where_replaces_the_default_where() -> None:
    loaded = policy("defaults: {where: {app: a}}\nmetrics: {m: {where: {route: r}}, n: {}}")
    assert loaded.rule_for("m").matches({"route": "r"})
    assert not loaded.rule_for("n").matches({"route": "r"})


@pytest.mark.parametrize(("text", "location", "message"), [
    ("metrics: {rag_qa: {rate: 1.5}}", "metrics.rag_qa.rate", "less than or equal to 1"),
    ("metrics: {rag_qa: {rat: 0.1}}", "metrics.rag_qa.rat", "Extra inputs"),
    ("metrics: {rag_qa: {where: {app: {regex: '('}}}}", "metrics.rag_qa.where",
     "regex does not compile"),
    ("metrics: {rag_qa: {where: {app: {in: [a], regex: b}}}}", "metrics.rag_qa.where",
     "exactly one"),
    ("metrics: {rag_qa: {shed_policy: block}}", "metrics.rag_qa.shed_policy", "drop_new"),
    ("redaction: {kinds: [ssn]}", "redaction.kinds", "unknown kinds"),
    ("redaction: {patterns: {Bad-Name: x}}", "redaction.patterns", "lower case"),
    ("metrics: {nope: {}}", "metrics.nope", "unknown metric 'nope'"),
    ("metrics: {rag_qa: {delay_s: 780}}", "metrics.rag_qa.delay_s",
     "EVALFLEET_VISIBILITY_TIMEOUT_S"),
    ("defaults: {delay_s: 1000}", "defaults.delay_s", "780 s"),
])
def test_errors_name_the_file_and_key(text: str, location: str, message: str) -> None:
    with pytest.raises(InvalidSamplingConfig) as caught:
        parse_policy(text, source="s.yaml", fallbacks=Fallbacks(), max_delay_s=780,
                     known_metrics=["rag_qa"])
    assert caught.value.path == "s.yaml" and caught.value.location == location
    assert str(caught.value).startswith(f"s.yaml, {location}: ")
    assert message in str(caught.value)


@pytest.mark.parametrize(("text", "message"), [
    ("metrics: [", "not valid YAML or JSON"), ("[1, 2]", "expected a mapping"),
])
def test_unreadable_files(text: str, message: str) -> None:
    with pytest.raises(InvalidSamplingConfig, match=message):
        parse_policy(text, source="s.yaml", fallbacks=Fallbacks())


def test_json_is_accepted_and_empty_is_the_defaults() -> None:
    loaded = parse_policy('{"metrics": {"rag_qa": {"rate": 0.25}}}', source="s.json",
                          fallbacks=Fallbacks())
    assert loaded.rule_for("rag_qa").rate == 0.25
    assert parse_policy("", source="s.yaml", fallbacks=Fallbacks()).metric_names == []


def test_max_delay_comes_from_the_visibility_timeout() -> None:
    settings = Settings(visibility_timeout_s=900, judge_timeout_s=60, retry_max_s=300)
    assert max_delay_for(settings) == 780


def test_redactor_of_the_policy() -> None:
    from collections import Counter

    counts: Counter[str] = Counter()
    text = policy(FULL).redactor.redact_text("EMP-123456 a@b.io +1 415 555 2671", counts)
    assert text == "[EMPLOYEE_ID] [EMAIL] +1 415 555 2671"


def test_the_example_config_is_valid() -> None:
    from pathlib import Path

    from evalfleet.core.metric import load_registry

    example = Path(__file__).parents[2] / "ops" / "sampling.example.yaml"
    loaded = parse_policy(example.read_bytes(), source=str(example), fallbacks=Fallbacks(),
                          max_delay_s=max_delay_for(Settings()),
                          known_metrics=load_registry().names())
    assert loaded.metric_names


def test_redaction_max_chars_comes_from_the_config() -> None:
    from collections import Counter

    from tests.producers.builders import policy

    redactor = policy("redaction: {max_chars: 10}").redactor
    counts: Counter[str] = Counter()
    assert redactor.redact_text("a@b.io and more text", counts) == "[EMAIL] and[TRUNCATED]"
