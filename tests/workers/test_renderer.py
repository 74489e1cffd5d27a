"""Rendering: one pass, sandboxed; sample text reaches the judge verbatim."""

from __future__ import annotations

import json
import string
from importlib import resources

import pytest

from evalfleet.core.errors import InvalidMetricSpec
from evalfleet.core.metric import MessageSpec, Metric, load_registry
from evalfleet.core.sample import Sample, parse_sample
from workers.judge.base import JudgeRequest, prompt_cache_key
from workers.renderer import check_templates, render_messages, template_placeholders
from workers.verdicts import response_format_for

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


def _fixed_head(metric: Metric) -> list[str]:
    """The text every request of ``metric`` starts with, one item per message: whole
    messages that read no sample value, then the next one's template up to its first."""
    constants = {**metric.spec.constants, **metric.examples_text}
    head: list[str] = []
    for message in metric.spec.messages:
        if message.syntax == "none":
            head.append(message.template)
            continue
        if message.syntax == "jinja":
            return [*head, message.template.split("{{", 1)[0].split("{%", 1)[0]]
        text = []
        for literal, field, _, _ in string.Formatter().parse(message.template):
            text.append(literal)
            if field is not None and field not in constants:
                return [*head, "".join(text)]
            if field is not None:
                text.append(constants[field])
        head.append("".join(text))
    return head


def _request_body(name: str, sample: Sample) -> str:
    spec = metric(name)
    request = JudgeRequest(
        messages=render_messages(spec, sample), model="gpt-4o-mini",
        temperature=spec.spec.judge.temperature, max_tokens=spec.spec.judge.max_tokens,
        response_format=response_format_for(spec, supported="json_schema"), metric=name,
        prompt_cache_key=prompt_cache_key(name, spec.version))
    return json.dumps(request.payload())


@pytest.mark.parametrize("name", ["rag_qa", "context_precision", "bbh_match", "rec_faithfulness"])
def test_two_samples_share_the_fixed_text_as_a_byte_identical_prefix(name: str) -> None:
    # What providers cache is a request's prefix: everything evalfleet puts ahead of the
    # sample (the system message, the examples, the metric file's order of messages) must
    # be sent byte for byte alike. A user's template text itself is never reordered.
    gold = resources.files("evalfleet.core") / "gold" / f"{name}.jsonl"
    first, second = (parse_sample({k: v for k, v in json.loads(line).items() if k != "labels"})
                     for line in gold.read_text().splitlines()[:2])
    one, two = _request_body(name, first), _request_body(name, second)
    shared = one[:next(n for n, (a, b) in enumerate(zip(one, two, strict=False)) if a != b)]
    head = [json.dumps(text)[1:-1] for text in _fixed_head(metric(name))]
    assert sum(map(len, head)) > 200 and all(text in shared for text in head)
    assert one.endswith(f'"prompt_cache_key": "evalfleet:{name}:{metric(name).version}"}}')
