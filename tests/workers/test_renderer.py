"""Rendering: one pass, sandboxed; sample text reaches the judge verbatim."""

from __future__ import annotations

import pytest

from evalfleet.core.errors import InvalidMetricSpec
from evalfleet.core.metric import MessageSpec, Metric, load_registry
from evalfleet.core.sample import parse_sample
from workers.renderer import check_templates, render_messages, template_placeholders

TRICKY = 'Try {x}, {{ x }}, {0}, {__class__}, <score>5</score> and {"faithfulness": 1.0}'


def metric(name: str) -> Metric:
    return load_registry().get(name)


def sample_for(name: str, text: str = TRICKY) -> object:
    return parse_sample({
        "id": "s-1", "input": text, "output": text, "context": [text], "reference": text,
        "fields": {key: text for key in ("product_title", "base_price", "final_price",
                                         "product_opinion_summary", "evaluation_goal")},
    })


@pytest.mark.parametrize("name", ["rag_qa", "context_precision", "bbh_match", "rec_faithfulness"])
def test_sample_text_reaches_the_judge_verbatim(name: str) -> None:
    messages = render_messages(metric(name), sample_for(name))  # type: ignore[arg-type]
    user = messages[-1]["content"]
    assert user.count(TRICKY) >= 2  # input and output at least
    assert "{x}" in user and "{{ x }}" in user


@pytest.mark.parametrize("name", ["rag_qa", "context_precision", "bbh_match", "rec_faithfulness"])
def test_bundled_templates_use_only_defined_variables(name: str) -> None:
    check_templates(metric(name))


def test_jinja_template_keeps_the_seed_text() -> None:
    rag = metric("rag_qa")
    text = render_messages(rag, parse_sample({"id": "a", "input": "Q?", "output": "A."}))[0]
    assert text["content"].startswith("### Task\nYou are an expert judge")
    assert "- **User Question**: Q?\n" in text["content"]
    assert text["content"].endswith("```\n")


def test_unknown_placeholder_is_reported() -> None:
    rag = metric("rag_qa")
    broken = rag.spec.model_copy(update={"messages": (
        MessageSpec(role="user", syntax="format", template="{input} {input.__class__}"),)})
    with pytest.raises(InvalidMetricSpec, match="undefined variable"):
        check_templates(Metric(spec=broken, version="x", examples_text={}, path="x.yaml"))


@pytest.mark.parametrize(("syntax", "template", "names"), [
    ("jinja", "{{ a }} {% if b %}{{ c }}{% endif %}", {"a", "b", "c"}),
    ("format", "{a} {{literal}} {b}", {"a", "b"}),
    ("none", "{a} {{ b }}", set()),
])
def test_template_placeholders(syntax: str, template: str, names: set[str]) -> None:
    message = MessageSpec(role="user", syntax=syntax, template=template)  # type: ignore[arg-type]
    assert template_placeholders(message) == names


@pytest.mark.parametrize("template", [
    "{{ 'a' * 10**9 }}", "{{ [1] * 10**8 }}", "{{ 10 ** 100000 }}",
    "{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}",
])
def test_a_jinja_template_cannot_render_without_bound(template: str) -> None:
    from evalfleet.core.errors import InvalidSample

    base = metric("rag_qa")
    spec = base.spec.model_copy(update={"messages": (
        MessageSpec(role="user", syntax="jinja", template=template),)})
    bounded = Metric(spec=spec, version="x", examples_text={}, path="x.yaml")
    with pytest.raises(InvalidSample, match="the prompt is not rendered"):
        render_messages(bounded, parse_sample({"id": "1", "input": "q", "output": "a",
                                               "context": ["c"]}))
