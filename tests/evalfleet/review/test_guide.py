"""A metric's guide for reviewers: what a score's values mean, shown on the review page."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from evalfleet.core.metric import load_registry
from evalfleet.review.guide import InvalidGuide, guide_path, load_guide, parse_guide
from evalfleet.web.app import _environment
from evalfleet.web.review_page import score_choices

REGISTRY = load_registry()


@pytest.mark.parametrize("name", ["context_precision", "rag_qa", "rec_faithfulness"])
def test_the_bundled_guides_cover_every_score(name: str) -> None:
    metric = REGISTRY.get(name)
    guide = load_guide(metric)
    assert set(guide) == set(metric.spec.scores)
    assert all(len(anchors) >= 2 for anchors in guide.values())


def test_a_continuous_score_says_what_its_middle_values_mean() -> None:
    anchors = load_guide(REGISTRY.get("context_precision"))["context_precision"]
    assert [a.value for a in anchors] == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert anchors[1].meaning.startswith("mostly inaccurate")  # about 0.25
    assert anchors[4].meaning.startswith("highly accurate")  # about 0.75


@pytest.mark.parametrize(("data", "named"), [
    (["a list"], "must map score names"),
    ({"nope": {0: "x"}}, "'nope' is not a score of context_precision"),
    ({"context_precision": "text"}, "context_precision: must map 1 to 20"),
    ({"context_precision": {}}, "must map 1 to 20"),
    ({"context_precision": {i / 100: "x" for i in range(21)}}, "must map 1 to 20"),
    ({"context_precision": {1.5: "x"}}, "'1.5' is not a value from 0 to 1"),
    ({"context_precision": {"high": "x"}}, "'high' is not a value"),
    ({"context_precision": {True: "x"}}, "'True' is not a value"),
    ({"context_precision": {float("nan"): "x"}}, "'nan' is not a value"),
    ({"context_precision": {0.5: ""}}, "0.5 needs a text"),
    ({"context_precision": {0.5: 7}}, "0.5 needs a text"),
    ({"context_precision": {0.5: "x" * 501}}, "0.5 needs a text of 1 to 500"),
])
def test_a_bad_guide_is_named_by_file_and_entry(data: Any, named: str) -> None:
    with pytest.raises(InvalidGuide, match="^guide.yaml: .*" + named.replace("(", r"\(")):
        parse_guide(data, metric=REGISTRY.get("context_precision"), where="guide.yaml")


def test_a_guide_beside_a_custom_metric_is_not_a_metric(tmp_path: Path) -> None:
    bundled = Path(REGISTRY.get("context_precision").path).parent
    for name in ("context_precision.yaml", "context_precision.examples.yaml"):
        shutil.copy(bundled / name, tmp_path / name)
    (tmp_path / "context_precision.guide.yaml").write_text("context_precision:\n  0: bad\n")
    metric = load_registry(tmp_path).get("context_precision")
    assert guide_path(metric) == tmp_path / "context_precision.guide.yaml"
    assert [a.meaning for a in load_guide(metric)["context_precision"]] == ["bad"]
    # The guide is not part of the prompt version: the judge never reads it.
    assert metric.version == REGISTRY.get("context_precision").version
    (tmp_path / "context_precision.guide.yaml").write_text("context_precision: [\n")
    with pytest.raises(InvalidGuide, match=r"context_precision\.guide\.yaml: not valid YAML"):
        load_guide(metric)
    (tmp_path / "context_precision.guide.yaml").unlink()
    assert load_guide(metric) == {}


def render_item(**context: Any) -> str:
    item = SimpleNamespace(id=1, metric="context_precision", sample_id="s-1", reason="random",
                           probability=0.1, stratum=None, labels_given=0, labels_wanted=1)
    metric = REGISTRY.get("context_precision")
    values = {"item": item, "sample": {}, "given": None, "problems": [], "csrf": "t",
              "scores": score_choices(metric), "description": metric.spec.description,
              "guide": load_guide(metric), "guide_problem": None, "page": "review",
              "reviewer": "ann", "request": None, **context}
    return str(_environment().get_template("review_item.html").render(**values))


def test_the_item_page_says_what_the_values_mean() -> None:
    page = render_item()
    assert 'id="guide-context_precision"' in page
    assert '<span class="value">0.2</span> mostly inaccurate' in page
    assert '<span class="value">0.8</span> highly accurate' in page
    assert "scored 0.0 to 1.0" in page  # the metric's description
    assert 'id="missing" role="alert" hidden' in page  # filled by the script on Enter
    hostile = render_item(guide={"context_precision": (SimpleNamespace(
        value=0.5, meaning="<script>x</script>"),)}, guide_problem="<b>bad</b>")
    assert "<script>x" not in hostile and "&lt;script&gt;x" in hostile
    assert "No guide to the scores: &lt;b&gt;bad&lt;/b&gt;" in hostile
