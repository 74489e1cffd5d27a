"""Metric files: the bundled ones load; versions follow content; bad files are named."""

from __future__ import annotations

import re
import shutil
from importlib import resources
from pathlib import Path

import pytest
import yaml

from evalfleet.core.errors import InvalidMetricSpec, InvalidSample, UnknownMetric
from evalfleet.core.metric import load_metric_file, load_registry
from evalfleet.core.sample import parse_sample

BUNDLED = Path(str(resources.files("prompts")))


def test_bundled_metrics_load_with_their_queues() -> None:
    registry = load_registry()
    assert {"rag_qa", "context_precision", "bbh_match", "rec_faithfulness"} <= set(registry.names())
    for metric in registry:
        assert metric.queue == f"eval.{metric.name}"
        assert len(metric.version) == 12


def test_unknown_metric_lists_the_known_ones() -> None:
    with pytest.raises(UnknownMetric, match=r"unknown metric 'nope'.*rag_qa"):
        load_registry().get("nope")


def copy_metric(tmp_path: Path, name: str = "rag_qa") -> Path:
    target = tmp_path / f"{name}.yaml"
    shutil.copy(BUNDLED / f"{name}.yaml", target)
    return target


def test_version_changes_with_the_file(tmp_path: Path) -> None:
    path = copy_metric(tmp_path)
    before = load_metric_file(path).version
    assert load_metric_file(path).version == before
    path.write_text(path.read_text().replace("### Task", "### Task (v2)"))
    assert load_metric_file(path).version != before


def test_version_changes_with_the_examples_file(tmp_path: Path) -> None:
    path = copy_metric(tmp_path, "context_precision")
    shutil.copy(BUNDLED / "context_precision.examples.yaml", tmp_path)
    before = load_metric_file(path).version
    examples = tmp_path / "context_precision.examples.yaml"
    examples.write_text(examples.read_text() + "\n# edited\n")
    assert load_metric_file(path).version != before


@pytest.mark.parametrize(("edit", "words"), [
    (lambda text: text.replace("name: rag_qa", "name: other"), "differs from the file name"),
    (lambda text: text.replace("format: json", "format: xml"), "output.format"),
    (lambda text: text.replace("{from: faithfulness}", "{from: nothing}"),
     "reads 'nothing', not a verdict field"),
    (lambda text: text.replace("{from: input, required: true}", "{from: inptu}"),
     "unknown sample path 'inptu'"),
    (lambda text: text + "\n  bad: [unclosed\n", "not valid YAML"),
])
def test_bad_metric_file_is_named(tmp_path: Path, edit: object, words: str) -> None:
    path = copy_metric(tmp_path)
    path.write_text(edit(path.read_text()))  # type: ignore[operator]
    with pytest.raises(InvalidMetricSpec, match=words) as caught:
        load_metric_file(path)
    assert str(path) in str(caught.value)


def test_required_inputs_are_checked() -> None:
    metric = load_registry().get("rag_qa")
    with pytest.raises(InvalidSample) as caught:
        metric.resolve_variables(parse_sample({"id": "a", "input": "q", "output": "  "}))
    assert caught.value.field == "output"
    assert caught.value.sample_id == "a"


def test_defaults_and_lists() -> None:
    metric = load_registry().get("rag_qa")
    values = metric.resolve_variables(parse_sample(
        {"id": "a", "input": "q", "output": "o", "context": ["one", "two"]}))
    assert values["context"] == "[1] one\n[2] two"
    assert values["evaluation_goal"] == "balanced"
    assert values["reference"] == ""


def test_extra_directory_adds_and_replaces_metrics(tmp_path: Path) -> None:
    replaced = copy_metric(tmp_path)
    replaced.write_text(replaced.read_text().replace("### Task", "### Task (ours)"))
    shutil.copy(BUNDLED / "rec_faithfulness.yaml", tmp_path / "rec_copy.yaml")
    (tmp_path / "rec_copy.yaml").write_text(
        (tmp_path / "rec_copy.yaml").read_text().replace("name: rec_faithfulness",
                                                         "name: rec_copy"))
    registry = load_registry(tmp_path)
    assert "rec_copy" in registry.names()
    assert registry.get("rag_qa").path == str(replaced)
    assert registry.get("rag_qa").version != load_registry().get("rag_qa").version


def test_missing_extra_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidMetricSpec, match="does not exist"):
        load_registry(tmp_path / "nope")


@pytest.mark.parametrize(("template", "words"), [
    ("Judge {}", "positional field {}"), ("Judge {0}", "positional field {0}"),
    ("Judge {0.x}", "positional field"), ("Judge { this", "does not parse"),
    ("Judge {examples_str:>99999999}", "pads to more than"),
])
def test_a_format_template_that_could_never_fill_is_refused_at_load(
    tmp_path: Path, template: str, words: str,
) -> None:
    path = copy_metric(tmp_path, "context_precision")
    shutil.copy(BUNDLED / "context_precision.examples.yaml", tmp_path)
    data = yaml.safe_load(path.read_text())
    data["messages"][0]["template"] = template
    data["messages"][0]["syntax"] = "format"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InvalidMetricSpec, match=re.escape(words)):
        load_metric_file(path)


@pytest.mark.parametrize("name", ["../outside.examples.yaml", "/etc/hostname", "missing.yaml"])
def test_the_examples_file_stays_in_the_metric_folder(tmp_path: Path, name: str) -> None:
    folder = tmp_path / "metrics"
    folder.mkdir()
    path = copy_metric(folder, "context_precision")
    shutil.copy(BUNDLED / "context_precision.examples.yaml", tmp_path / "outside.examples.yaml")
    data = yaml.safe_load(path.read_text())
    data["examples"]["examples_str"]["file"] = name
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InvalidMetricSpec, match=r"outside the metric's folder|does not exist"):
        load_metric_file(path)


@pytest.mark.parametrize("data", [
    {"id": "a", "input": "q", "output": "o", "context": ["c"]},
    {"id": "a", "input": "q", "output": "  "},
    {"id": "a", "input": "", "output": "o"},
    {"id": "a", "input": "q", "output": "o", "context": []},
])
def test_checking_inputs_agrees_with_resolving_them(data: dict[str, object]) -> None:
    for metric in load_registry():
        sample = parse_sample(data)
        try:
            metric.resolve_variables(sample)
        except InvalidSample as exc:
            with pytest.raises(InvalidSample) as caught:
                metric.check_inputs(sample)
            assert (caught.value.field, caught.value.reason) == (exc.field, exc.reason)
        else:
            metric.check_inputs(sample)
