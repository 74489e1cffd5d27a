"""Check metrics as files: what loads, what is refused when it loads, and versions."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
import yaml

from evalfleet.core.checkspec import (
    MAX_SCHEMA_DEPTH,
    check_model,
    check_schema_document,
    is_check_model,
)
from evalfleet.core.errors import InvalidMetricSpec
from evalfleet.core.metric import load_metric_file

EXAMPLES = Path(str(resources.files("prompts"))) / "examples"


def write_metric(tmp_path: Path, checks: dict[str, object], **extra: object) -> Path:
    path = tmp_path / "contract.yaml"
    path.write_text(yaml.safe_dump({"name": "contract", "kind": "check", "checks": checks,
                                    **extra}))
    return path


def test_the_example_check_metric_loads_with_one_boolean_score_per_check() -> None:
    metric = load_metric_file(EXAMPLES / "output_contract.yaml")
    names = [check.name for check in metric.checks]
    assert names == ["valid_json", "answer_schema", "no_api_key", "no_internal_url",
                     "short_enough"]
    assert list(metric.spec.scores) == names
    assert {field.type for field in metric.spec.output.fields.values()} == {"boolean"}
    assert metric.checks[1].schema["required"] == ["answer", "sources"]  # type: ignore[index]
    assert metric.checks[0].judge_model == "check:valid_json"
    assert not metric.spec.messages


def test_a_team_check_is_a_number_on_its_scale(tmp_path: Path) -> None:
    metric = load_metric_file(write_metric(tmp_path, {
        "polite": {"check": "team", "function": "acme.checks:polite", "scale": [1, 5]},
        "sure": {"check": "team", "entry_point": "sure", "binary": True}}))
    polite = metric.spec.output.fields["polite"]
    assert (polite.type, polite.minimum, polite.maximum) == ("number", 1, 5)
    assert metric.spec.scores["polite"].scale == (1, 5)
    assert metric.spec.output.fields["sure"].type == "boolean"


@pytest.mark.parametrize(("checks", "extra", "message"), [
    ({"leak": {"check": "never_matches", "pattern": "(?=sk-)sk"}}, {},
     r"pattern '\(\?=sk-\)sk' is refused: .*lookaround"),
    ({"leak": {"check": "matches", "pattern": "(a"}}, {}, r"pattern '\(a' is refused"),
    ({"s": {"check": "json_schema", "schema": {"$ref": "https://example.com/s.json"}}}, {},
     r"\$ref 'https://example.com/s.json' points outside the schema"),
    ({"s": {"check": "json_schema", "schema": {"type": "objekt"}}}, {},
     r"not a valid JSON Schema at type"),
    ({"s": {"check": "json_schema"}}, {}, r"exactly one of 'schema' and 'schema_file'"),
    ({"n": {"check": "length"}}, {}, r"give 'min', 'max' or both"),
    ({"n": {"check": "length", "min": 5, "max": 2}}, {}, r"'min' is above 'max'"),
    ({"n": {"check": "length", "max": 2, "count": "words"}}, {}, r"count"),
    ({"e": {"check": "equals", "normalise": ["accents"]}}, {}, r"normalise"),
    ({"c": {"check": "contains_any", "values": []}}, {}, r"values"),
    ({"t": {"check": "team"}}, {}, r"exactly one of 'function' and 'entry_point'"),
    ({"t": {"check": "team", "function": "no colon"}}, {}, r"function"),
    ({"t": {"check": "team", "function": "a:b", "scale": [1, 1]}}, {}, r"low to high"),
    ({"t": {"check": "team", "function": "a:b", "timeout_s": 0}}, {}, r"timeout_s"),
    ({"x": {"check": "spellcheck"}}, {}, r"does not match any of the expected tags"),
    ({"Bad-Name": {"check": "json_valid"}}, {}, r"check name 'Bad-Name'"),
    ({}, {}, r"at least one check"),
    ({"j": {"check": "json_valid"}}, {"scores": {"j": {"from": "j"}}}, r"no 'output' or 'scores'"),
    ({"j": {"check": "json_valid"}},
     {"messages": [{"role": "user", "template": "x"}]}, r"a check metric has no 'messages'"),
])
def test_a_bad_check_is_refused_at_load_naming_it(
    tmp_path: Path, checks: dict[str, object], extra: dict[str, object], message: str,
) -> None:
    with pytest.raises(InvalidMetricSpec, match=message):
        load_metric_file(write_metric(tmp_path, checks, **extra))


def test_a_judged_metric_may_not_carry_checks(tmp_path: Path) -> None:
    path = tmp_path / "judged.yaml"
    data = yaml.safe_load((EXAMPLES.parent / "context_precision.yaml").read_text())
    data.update(name="judged", checks={"j": {"check": "json_valid"}})
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InvalidMetricSpec, match="'checks' belong to a metric of kind: check"):
        load_metric_file(path)


def deep_schema(levels: int) -> dict[str, object]:
    schema: dict[str, object] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "array", "items": schema}
    return schema


def deep_schema_text(levels: int) -> str:
    """The JSON text of :func:`deep_schema` (json.dumps itself recurses)."""
    return '{"type": "array", "items": ' * levels + '{"type": "string"}' + "}" * levels


def test_a_schema_ten_thousand_levels_deep_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "deep.json").write_text(deep_schema_text(10_000))
    with pytest.raises(InvalidMetricSpec, match=r"checks.s: schema file 'deep.json': "):
        load_metric_file(write_metric(tmp_path, {"s": {"check": "json_schema",
                                                       "schema_file": "deep.json"}}))
    inline = tmp_path / "contract.yaml"  # flow style: YAML nests it as deep
    inline.write_text("name: contract\nkind: check\nchecks:\n  s:\n    check: json_schema\n"
                      f"    schema: {deep_schema_text(10_000)}\n")
    with pytest.raises(InvalidMetricSpec, match="nested too deeply to read"):
        load_metric_file(inline)
    with pytest.raises(ValueError, match=f"deeper than {MAX_SCHEMA_DEPTH} levels"):
        check_schema_document(deep_schema(MAX_SCHEMA_DEPTH))


def test_a_schema_file_stays_in_the_metric_folder(tmp_path: Path) -> None:
    with pytest.raises(InvalidMetricSpec, match=r"schema file '\.\./x\.json' is outside"):
        load_metric_file(write_metric(tmp_path, {"s": {"check": "json_schema",
                                                       "schema_file": "../x.json"}}))


def test_a_check_version_follows_its_parameters_and_its_schema_file(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text('{"type": "object"}')
    checks = {"s": {"check": "json_schema", "schema_file": "s.json"},
              "n": {"check": "length", "max": 10}}
    first = {c.name: c.version for c in load_metric_file(write_metric(tmp_path, checks)).checks}
    checks["n"]["max"] = 11  # type: ignore[index]
    second = {c.name: c.version for c in load_metric_file(write_metric(tmp_path, checks)).checks}
    assert first["s"] == second["s"] and first["n"] != second["n"]
    (tmp_path / "s.json").write_text('{"type": "array"}')
    third = {c.name: c.version for c in load_metric_file(write_metric(tmp_path, checks)).checks}
    assert third["s"] != second["s"] and third["n"] == second["n"]


def test_check_models_are_named_apart_from_judges() -> None:
    assert check_model("no_key") == "check:no_key"
    assert is_check_model("check:no_key") and not is_check_model("gpt-4o-mini")
