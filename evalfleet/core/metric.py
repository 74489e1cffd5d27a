"""Metric definitions: the data model of a metric file in ``prompts/`` and its loader.

A metric file (YAML) holds everything that makes a metric: the judge messages
and their template syntax, how sample fields map to template variables, the
verdict the judge must return, the scores stored from it and the judge options.
Adding a metric means adding a file; no code changes.

The prompt version is derived from the bytes of the metric file and any file it
includes (few-shot examples), so editing either changes the version.
"""

from __future__ import annotations

import hashlib
import json
import re
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import orjson
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from evalfleet.core.checkspec import (
    CHECK_MODEL_PREFIX,
    CheckSpec,
    JsonSchema,
    LoadedCheck,
    Team,
    check_model,
    check_schema_document,
    check_version,
    derive_check_scores,
)
from evalfleet.core.endpoint import ENDPOINT_NAME
from evalfleet.core.errors import InvalidMetricSpec, InvalidSample, UnknownMetric
from evalfleet.core.message import queue_for
from evalfleet.core.sample import Sample

#: Characters of the content hash kept as the prompt version.
VERSION_LENGTH = 12

#: Ending of a metric's guide for reviewers (:mod:`evalfleet.review.guide`), a file beside
#: the metric's that is neither a metric nor part of its version.
GUIDE_SUFFIX = ".guide.yaml"

_DIGIT_RUN = re.compile(r"[0-9]+")

#: Paths a template variable may read from a sample.
SAMPLE_PATHS = ("id", "input", "output", "context", "reference", "timestamp", "trajectory",
                "session")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MessageSpec(_Model):
    """One chat message sent to the judge."""

    role: Literal["system", "user"]
    """Chat role of the message."""

    syntax: Literal["jinja", "format", "none"] = "format"
    """``jinja``: sandboxed Jinja ``{{ x }}``; ``format``: Python ``{x}``; ``none``: sent as is."""

    template: str
    """The text, with placeholders in the chosen syntax."""

    @model_validator(mode="after")
    def _named_fields_only(self) -> MessageSpec:
        if self.syntax == "format":
            check_format_fields(self.template)
        return self


def check_format_fields(template: str) -> None:
    """Refuse a Python-format template that ``format_map`` could never fill.

    A bare ``{}`` or a positional ``{0}`` asks for an argument a mapping does not
    give: the template would load and then fail every job. Unbalanced braces fail
    the same way.

    Raises:
        ValueError: Naming the field or the parse problem.
    """
    try:
        parsed = [(name, spec) for _, name, spec, _ in string.Formatter().parse(template)
                  if name is not None]
    except ValueError as exc:
        raise ValueError(f"template does not parse: {exc} (write a literal brace as "
                         "{{ or }})") from None
    for name, spec in parsed:
        if name == "" or name.split(".", 1)[0].split("[", 1)[0].isdigit():
            raise ValueError(f"template has a positional field {{{name}}}: name every "
                             "field (write a literal brace as {{ or }})")
        if spec and any(len(digits) > 4 for digits in _DIGIT_RUN.findall(spec)):
            raise ValueError(f"field {{{name}:{spec}}} pads to more than 9,999 characters")


class VariableSpec(_Model):
    """Where one template variable comes from: a sample path or a literal value."""

    source: str | None = Field(default=None, alias="from")
    """Sample path: ``input``, ``output``, ``context``, ``reference``, ``id``,
    ``timestamp``, ``trajectory`` (its steps), ``trajectory.tools`` (the offered tools),
    ``session`` (a conversation's turns), ``fields.<key>`` or ``attributes.<key>``."""

    value: str | None = None
    """A literal value (used instead of ``from``)."""

    required: bool = False
    """Reject samples where the value is missing or blank (checked by the producer too)."""

    default: str | None = None
    """Used when the sample has no value (missing, null or blank)."""

    list_style: Literal["numbered", "lines", "json"] = "numbered"
    """How a list (``context``) is written: ``[1] a`` lines, plain lines, or JSON."""

    @model_validator(mode="after")
    def _one_source(self) -> VariableSpec:
        if (self.source is None) == (self.value is None):
            raise ValueError("give exactly one of 'from' and 'value'")
        if self.source is not None and not _is_sample_path(self.source):
            raise ValueError(f"unknown sample path {self.source!r}")
        return self


class ExamplesSpec(_Model):
    """A few-shot file rendered into one template variable."""

    file: str
    """YAML file beside the metric file: a list of mappings."""

    template: str
    """Python-format template applied to each example; ``{n}`` is its 1-based number."""

    @model_validator(mode="after")
    def _named_fields_only(self) -> ExamplesSpec:
        check_format_fields(self.template)
        return self

    separator: str = "\n\n"
    """Put between rendered examples."""


FieldType = Literal["number", "integer", "boolean", "string", "enum", "id"]
NullRule = Literal["never", "allowed", "when_reference_missing"]

#: How a score is read: yes/no, a 1-5 style rubric, or a value in 0..1. Alert rules and
#: calibration pick their statistics by it.
ScoreKind = Literal["binary", "ordinal", "continuous"]


class FieldSpec(_Model):
    """One key of the verdict the judge returns."""

    type: FieldType
    """``number`` (float), ``integer``, ``boolean``, ``string``, ``enum`` or ``id``
    (a string or integer that must equal the sample id)."""

    minimum: float | None = None
    """Smallest allowed value (number, integer)."""

    maximum: float | None = None
    """Largest allowed value (number, integer)."""

    values: tuple[str, ...] = ()
    """Allowed values (enum)."""

    nullable: NullRule = "never"
    """When null is a valid value: never, always, or exactly when the sample's
    reference is missing (trimmed, lowercased: empty, ``none`` or null)."""

    required: bool = True
    """Reject the verdict when the key is absent."""

    @model_validator(mode="after")
    def _check_bounds(self) -> FieldSpec:
        if self.type in ("number", "integer") and (self.minimum is None or self.maximum is None):
            raise ValueError("numbers need 'minimum' and 'maximum'")
        if self.type == "enum" and not self.values:
            raise ValueError("enums need 'values'")
        return self


class FailureSpec(_Model):
    """How the judge declares that it could not evaluate (a valid verdict, not a parse error)."""

    field: str
    """The status field, e.g. ``evaluation_status``."""

    equals: str
    """The value that means failure, e.g. ``failed``."""

    reason_fields: tuple[str, ...] = ()
    """Fields whose text explains the failure."""


class OutputSpec(_Model):
    """The verdict the judge must return."""

    format: Literal["json", "score_tag"]
    """``json``: one JSON object; ``score_tag``: free text ending ``<tag>N</tag>``."""

    fields: dict[str, FieldSpec] = Field(default_factory=dict)
    """JSON verdict keys; for ``score_tag``, the single key the tag value is stored under."""

    tag: str = "score"
    """Tag name for ``score_tag``."""

    label: str | None = None
    """Text that introduces the final score tag, e.g. ``Score-``; tags with it win."""

    reason_fields: tuple[str, ...] = ()
    """Fields joined into the verdict's reason (``score_tag``: the text before the tag)."""

    failure: FailureSpec | None = None
    """A judge-declared failure, if the metric has one."""

    step_field: str | None = None
    """An integer field in which the judge names the trajectory step where things went
    wrong (numbered from 1, as the prompt writes the steps); kept on the verdict as
    ``failed_step`` and shown with the alert's evidence."""

    @model_validator(mode="after")
    def _check_shape(self) -> OutputSpec:
        if not self.fields:
            raise ValueError("'fields' must name at least one verdict key")
        if self.format == "score_tag":
            if len(self.fields) != 1:
                raise ValueError("a score_tag output has exactly one field")
            (spec,) = self.fields.values()
            if spec.type not in ("integer", "number"):
                raise ValueError("a score_tag field must be a number or integer")
        for name in (*self.reason_fields, *(self.failure.reason_fields if self.failure else ())):
            if name not in self.fields:
                raise ValueError(f"reason field {name!r} is not in 'fields'")
        if self.failure and self.failure.field not in self.fields:
            raise ValueError(f"failure field {self.failure.field!r} is not in 'fields'")
        if self.step_field is not None and (
                self.step_field not in self.fields
                or self.fields[self.step_field].type != "integer"):
            raise ValueError(f"step field {self.step_field!r} is not an integer field")
        return self


class ScoreSpec(_Model):
    """One stored score, normalised to 0..1 from a verdict field."""

    source: str = Field(alias="from")
    """The verdict field it is read from."""

    scale: tuple[float, float] = (0.0, 1.0)
    """Raw range: stored as ``(raw - low) / (high - low)``; booleans map to 0 and 1."""


#: What a check tier settles: one normalised value (0..1) for every score, or one per
#: score name (null where the score is null).
SettledScores = float | dict[str, float | None]


class TierSpec(_Model):
    """One tier of a metric's cascade: a judge, or a deterministic check before the
    judges (docs/judges.md#cascades)."""

    model: str | None = Field(default=None, min_length=1, max_length=128)
    """The judge model asked (a judge tier)."""

    check: CheckSpec | None = None
    """A check tier: a built-in check (as a ``kind: check`` metric writes one), run in
    the worker before the judges. When its result is decisive (``on_fail`` for a
    failure, ``on_pass`` for a pass) it settles the sample outright, at no cost;
    otherwise the sample goes on to the next tier."""

    name: str | None = Field(default=None, pattern=r"^[a-z][a-z0-9_]{0,62}$")
    """A check tier's name (``check:<name>`` in its verdicts' record); its check's kind
    unless given."""

    on_fail: SettledScores | None = None
    """The scores a failed check settles (``0``: every score 0)."""

    on_pass: SettledScores | None = None
    """The scores a passed check settles; None: a pass settles nothing."""

    endpoint: str | None = Field(default=None, pattern=ENDPOINT_NAME)
    """The named judge endpoint it is asked on (``EVALFLEET_JUDGE_ENDPOINTS``: its URL,
    key and limits live in the settings, so moving a server never changes a verdict
    key); None: the fleet's judge endpoint (``OPENAI_BASE_URL``)."""

    top_logprobs: int = Field(default=5, ge=0, le=20)
    """Alternatives asked per token, to read the verdict's confidence from."""

    samples: int = Field(default=1, ge=1, le=10)
    """1: the verdict's confidence is read from log-probabilities; k > 1 (for a server
    that returns none): the tier is asked k times at ``sample_temperature`` and the
    confidence is the share of the k verdicts agreeing with the one kept (k calls)."""

    sample_temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    """Sampling temperature of the k samples."""

    mode: Literal["call", "batch"] = "call"
    """``call``: asked while the worker waits. ``batch``: through the fleet's Batch API
    at its batch price: the job waits in the spool for the tier's line, and the
    collector reads its confidence from the line's log-probabilities, then settles the
    job or asks the next tier (docs/batch.md#cascades-with-a-batch-tier)."""

    @property
    def label(self) -> str:
        """What names the tier in its verdicts' record: the model, or ``check:<name>``."""
        if self.check is None:
            assert self.model is not None
            return self.model
        return check_model(self.name or self.check.check)

    @model_validator(mode="after")
    def _judge_or_check(self) -> TierSpec:
        if (self.model is None) == (self.check is None):
            raise ValueError("a tier gives exactly one of 'model' and 'check'")
        if self.check is None:
            if self.on_fail is not None or self.on_pass is not None or self.name is not None:
                raise ValueError("'on_fail', 'on_pass' and 'name' belong to a check tier")
            if self.mode == "batch" and self.samples > 1:
                raise ValueError("a batch tier's confidence is read from log-probabilities: "
                                 "'samples' 1 (k samples would be k lines of one job)")
            if self.mode == "batch" and self.endpoint is not None:
                raise ValueError("a batch tier goes through the fleet's Batch API "
                                 "(EVALFLEET_BATCH_BASE_URL, else OPENAI_BASE_URL): no "
                                 "'endpoint'")
            return self
        if self.mode == "batch":
            raise ValueError("a check tier runs in the worker: it has no 'mode: batch'")
        if isinstance(self.check, Team):
            raise ValueError("a cascade's check tier is a built-in check (a team check "
                             "runs in a process pool: make it a kind: check metric)")
        if self.on_fail is None and self.on_pass is None:
            raise ValueError("a check tier settles something: give 'on_fail', 'on_pass' "
                             "or both")
        if self.endpoint is not None:
            raise ValueError("a check tier runs in the worker: it has no 'endpoint'")
        return self


class JudgeOptions(_Model):
    """Per-metric judge options; None inherits the settings."""

    model: str | None = None
    """Judge model for this metric."""

    temperature: float = 0.0
    """Sampling temperature."""

    max_tokens: int = Field(default=1024, gt=0)
    """Upper bound on the reply's tokens; a reply cut here is truncated, never repaired."""

    response_format: Literal["json_schema", "json_object", "text"] = "text"
    """Constrained output asked of the judge (lowered to what the judge supports)."""

    mode: Literal["call", "batch"] = "call"
    """``call``: judged while the worker waits; ``batch``: through the provider's Batch
    API at its batch price, verdicts arriving within its turnaround (docs/batch.md)."""

    budget_tokens: int = Field(default=32_000, gt=0)
    """Most tokens of the rendered prompt; a trajectory is compacted into it."""

    cascade: tuple[TierSpec, ...] = ()
    """Judges asked in turn, cheapest first: a tier's verdict is kept when its confidence
    reaches the tier's fitted threshold, else the next is asked (docs/judges.md#cascades).
    Empty: one judge, ``model``."""

    @property
    def main_model(self) -> str | None:
        """The model every job of the metric reaches: ``model``, or the cascade's last
        tier (for probes, rate limits and capacity shown per metric)."""
        return self.cascade[-1].model if self.cascade else self.model

    @model_validator(mode="after")
    def _cascade_fits(self) -> JudgeOptions:
        if not self.cascade:
            return self
        models = [tier.label for tier in self.cascade]
        if len(models) < 2:
            raise ValueError("a cascade needs at least two tiers (one judge: 'model')")
        if len(set(models)) != len(models):
            raise ValueError(f"cascade names a model twice: {models}")
        judges = [tier.check is None for tier in self.cascade]
        if True not in judges or not all(judges[judges.index(True):]):
            raise ValueError("a cascade's check tiers come first, and a judge tier after "
                             "them")
        if self.model is not None:
            raise ValueError("give 'model' or 'cascade', not both")
        if self.mode == "batch":
            raise ValueError("a cascade's metric is judged in mode 'call' only: give a "
                             "tier 'mode: batch' to ask it through the Batch API")
        return self


class MetricFile(_Model):
    """The content of one metric file, as written."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,62}$")
    """Metric name; also names the queue ``eval.<name>``."""

    description: str = ""
    """One paragraph for people."""

    seed: str | None = None
    """Where the judge prompt came from."""

    unit: Literal["call", "trace", "session"] = "call"
    """What one verdict judges: ``call``, one question and answer; ``trace``, an agent's
    whole run (the sample's ``trajectory``; its id is the trace id); ``session``, a whole
    conversation (the sample's ``session``; its id names the version,
    ``<session>#<turns>-<digest>``)."""

    constants: dict[str, str] = Field(default_factory=dict)
    """Values usable in templates and in verdict field names (``{VERDICT_KEY}``)."""

    variables: dict[str, VariableSpec] = Field(default_factory=dict)
    """Template variables and where they come from."""

    examples: dict[str, ExamplesSpec] = Field(default_factory=dict)
    """Template variables filled from few-shot files."""

    kind: Literal["judge", "check"] = "judge"
    """``judge``: scored by the judge from ``messages``; ``check``: scored by code, one
    score per entry of ``checks`` (evalfleet.core.checkspec)."""

    checks: dict[str, CheckSpec] = Field(default_factory=dict)
    """``kind: check``: the checks by name; each is a score and its own verdict."""

    messages: tuple[MessageSpec, ...] = ()
    """The messages sent to the judge, in order."""

    output: OutputSpec
    """The verdict the judge must return."""

    scores: dict[str, ScoreSpec] = Field(min_length=1)
    """Scores stored from the verdict, by name."""

    judge: JudgeOptions = JudgeOptions()
    """Judge options for this metric."""

    @model_validator(mode="before")
    @classmethod
    def _check_scores(cls, data: Any) -> Any:
        return derive_check_scores(data) if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _scores_read_fields(self) -> MetricFile:
        if (self.kind == "judge") == (not self.messages):
            raise ValueError("a judged metric needs 'messages'" if self.kind == "judge"
                             else "a check metric has no 'messages'")
        for name, score in self.scores.items():
            if score.source not in self.output.fields:
                raise ValueError(f"score {name!r} reads {score.source!r}, not a verdict field")
        for number, tier in enumerate(self.judge.cascade, start=1):
            for side in ("on_fail", "on_pass"):
                settled = getattr(tier, side)
                if settled is not None:
                    _settled_scores(settled, scores=self.scores,
                                    where=f"judge.cascade[{number}].{side}")
        return self


def _settled_scores(settled: SettledScores, *, scores: Mapping[str, ScoreSpec],
                    where: str) -> dict[str, float | None]:
    values = dict.fromkeys(scores, settled) if not isinstance(settled, dict) else settled
    if set(values) != set(scores):
        raise ValueError(f"{where} names {sorted(values)}; a check tier settles every score: "
                         f"{sorted(scores)}")
    for name, value in values.items():
        if value is not None and not 0.0 <= value <= 1.0:
            raise ValueError(f"{where}.{name}: {value} is not a normalised score (0 to 1)")
    return {name: None if value is None else float(value) for name, value in values.items()}


def settled_scores(metric: Metric, tier: TierSpec, *,
                   passed: bool) -> dict[str, float | None] | None:
    """The normalised scores a check tier's result settles; None when it is not decisive.

    Args:
        metric: The metric whose cascade holds the tier.
        tier: A check tier.
        passed: Whether its check passed.
    """
    settled = tier.on_pass if passed else tier.on_fail
    if settled is None:
        return None
    return _settled_scores(settled, scores=metric.spec.scores, where="tier")


@dataclass(frozen=True)
class Metric:
    """A loaded metric: the file's content plus what is derived from it."""

    spec: MetricFile
    """The file's content, constants already substituted into verdict field names."""

    version: str
    """Prompt version: a hash of the metric file and its included files."""

    examples_text: dict[str, str]
    """Few-shot variables, rendered once at load."""

    path: str
    """Where it was loaded from."""

    checks: tuple[LoadedCheck, ...] = ()
    """``kind: check``: its checks, in file order."""

    tier_checks: dict[int, LoadedCheck] = field(default_factory=dict)
    """A cascade's check tiers, by their index in ``judge.cascade``."""

    @property
    def name(self) -> str:
        """The metric's name."""
        return self.spec.name

    @property
    def queue(self) -> str:
        """The broker queue that carries this metric's jobs."""
        return queue_for(self.spec.name)

    def resolve_variables(self, sample: Sample, *,
                          given: Mapping[str, str] | None = None) -> dict[str, str]:
        """Every template variable's text for ``sample``: constants, examples, sample values.

        Args:
            sample: The sample.
            given: Texts the caller made itself (a compacted trajectory), used as they are.

        Raises:
            InvalidSample: When a required value is missing or blank, naming the field.
        """
        values = dict(self.spec.constants)
        values.update(self.examples_text)
        for name, variable in self.spec.variables.items():
            values[name] = (given[name] if given and name in given
                            else _variable_text(variable, sample))
        return values

    def check_inputs(self, sample: Sample) -> None:
        """Check that ``sample`` has every value this metric requires, as
        :meth:`resolve_variables` does, without building the texts.

        Raises:
            InvalidSample: When a required value is missing or blank, naming the field.
        """
        for variable in self.spec.variables.values():
            if variable.value is None and variable.required:
                assert variable.source is not None
                _required_value(variable.source, sample)


def _variable_text(variable: VariableSpec, sample: Sample) -> str:
    if variable.value is not None:
        return variable.value
    assert variable.source is not None
    if variable.required:
        value = _required_value(variable.source, sample)
    else:
        value = sample_value(sample, variable.source)
        if _blank(value):
            return variable.default or ""
    if isinstance(value, list):
        return _list_text(value, variable.list_style)
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):  # a trajectory or session the renderer did not compact
        return value.model_dump_json()
    return json.dumps(value, ensure_ascii=False)


def _required_value(source: str, sample: Sample) -> Any:
    value = sample_value(sample, source)
    if _blank(value):
        raise InvalidSample("is required by this metric", sample_id=sample.id, field=source)
    return value


def _blank(value: Any) -> bool:
    return value is None or value == [] or (isinstance(value, str) and not value.strip())


def sample_value(sample: Sample, path: str) -> Any:
    """The value at ``path`` in ``sample`` (``input``, ``fields.product_title``...), or None."""
    head, _, key = path.partition(".")
    if head == "fields":
        return sample.fields.get(key)
    if head == "attributes":
        return sample.attributes.get(key)
    if head == "trajectory" and key:  # trajectory.tools
        return getattr(sample.trajectory, key, None)
    value = getattr(sample, head)
    return value.isoformat() if isinstance(value, datetime) else value


def _list_text(items: list[Any], style: str) -> str:
    if style == "json":
        return json.dumps(items, ensure_ascii=False)
    texts = [item if isinstance(item, str) else json.dumps(item, ensure_ascii=False)
             for item in items]
    if style == "lines":
        return "\n".join(texts)
    return "\n".join(f"[{n}] {text}" for n, text in enumerate(texts, 1))


def load_metric_file(path: Path) -> Metric:
    """Load and check one metric file.

    Args:
        path: The YAML file.

    Returns:
        The metric.

    Raises:
        InvalidMetricSpec: Naming the file and what is wrong.
    """
    raw = path.read_bytes()
    digest = hashlib.sha256(raw)
    try:
        data = yaml.safe_load(raw)
        spec = MetricFile.model_validate(_substitute_constants(data))
    except yaml.YAMLError as exc:
        raise InvalidMetricSpec(f"not valid YAML: {exc}", path=str(path)) from None
    except RecursionError:
        raise InvalidMetricSpec("nested too deeply to read", path=str(path)) from None
    except ValidationError as exc:
        raise InvalidMetricSpec(_describe(exc), path=str(path)) from None
    if spec.name != path.stem:
        raise InvalidMetricSpec(f"name {spec.name!r} differs from the file name", path=str(path))
    examples_text = {}
    for variable, examples in spec.examples.items():
        example_bytes = _beside(path, examples.file, what="examples file").read_bytes()
        digest.update(example_bytes)
        examples_text[variable] = _render_examples(examples, example_bytes, path=path)
    checks = tuple(_load_check(name, check, path=path, digest=digest)
                   for name, check in spec.checks.items())
    tier_checks = {index: _load_check(tier.label.removeprefix(CHECK_MODEL_PREFIX), tier.check,
                                      path=path, digest=digest)
                   for index, tier in enumerate(spec.judge.cascade) if tier.check is not None}
    return Metric(
        spec=spec, version=digest.hexdigest()[:VERSION_LENGTH], examples_text=examples_text,
        path=str(path), checks=checks, tier_checks=tier_checks,
    )


def _load_check(name: str, spec: Any, *, path: Path, digest: Any) -> LoadedCheck:
    """One check with the file it reads (a schema), which its version covers too."""
    if not (isinstance(spec, JsonSchema) and spec.schema_file is not None):
        return LoadedCheck(name, spec, check_version(spec, length=VERSION_LENGTH),
                           spec.schema_ if isinstance(spec, JsonSchema) else None)
    raw = _beside(path, spec.schema_file, what="schema file").read_bytes()
    digest.update(raw)
    try:
        schema = orjson.loads(raw)
        check_schema_document(schema)
    except (orjson.JSONDecodeError, ValueError) as exc:
        raise InvalidMetricSpec(f"checks.{name}: schema file {spec.schema_file!r}: {exc}",
                                path=str(path)) from None
    return LoadedCheck(name, spec, check_version(spec, files=raw, length=VERSION_LENGTH),
                       schema)


class MetricRegistry:
    """The metrics available to this process, by name."""

    def __init__(self, metrics: Iterable[Metric]) -> None:
        self._metrics = {metric.name: metric for metric in metrics}

    def get(self, name: str) -> Metric:
        """The metric called ``name``.

        Raises:
            UnknownMetric: When no file defines it.
        """
        try:
            return self._metrics[name]
        except KeyError:
            raise UnknownMetric(name, known=list(self._metrics)) from None

    def names(self) -> list[str]:
        """All metric names, sorted."""
        return sorted(self._metrics)

    def check_names(self) -> list[str]:
        """The names of the metrics of kind ``check``, sorted."""
        return [name for name in self.names() if self._metrics[name].spec.kind == "check"]

    def __iter__(self) -> Any:
        return iter(self._metrics[name] for name in self.names())


def load_registry(extra_dir: Path | None = None) -> MetricRegistry:
    """Load the bundled metric files, then those in ``extra_dir``.

    A file in ``extra_dir`` adds a metric, or replaces the bundled metric of the
    same name.

    Raises:
        InvalidMetricSpec: When any file is invalid.
    """
    metrics = {m.name: m for m in _load_dir(Path(str(resources.files("prompts"))))}
    if extra_dir is not None:
        if not extra_dir.is_dir():
            raise InvalidMetricSpec("metrics directory does not exist", path=str(extra_dir))
        metrics.update({m.name: m for m in _load_dir(extra_dir)})
    return MetricRegistry(metrics.values())


def _load_dir(directory: Path) -> list[Metric]:
    files = sorted(p for p in directory.glob("*.yaml")
                   if not p.name.endswith((".examples.yaml", GUIDE_SUFFIX)))
    return [load_metric_file(path) for path in files]


def _is_sample_path(path: str) -> bool:
    head, _, key = path.partition(".")
    if head in ("fields", "attributes"):
        return bool(key)
    return path in SAMPLE_PATHS or path == "trajectory.tools"


def _substitute_constants(data: Any) -> Any:
    """Resolve ``{CONSTANT}`` in verdict field names, reason and failure fields, score sources."""
    if not isinstance(data, dict):
        return data
    constants = data.get("constants") or {}
    if not isinstance(constants, dict) or not constants:
        return data

    def resolve(name: Any) -> Any:
        if isinstance(name, str) and name.startswith("{") and name.endswith("}"):
            return constants.get(name[1:-1], name)
        return name

    output = dict(data.get("output") or {})
    output["fields"] = {resolve(k): v for k, v in (output.get("fields") or {}).items()}
    output["reason_fields"] = [resolve(k) for k in output.get("reason_fields") or []]
    failure = output.get("failure")
    if isinstance(failure, dict):
        # The failure spec names verdict fields too; left unresolved it would point
        # at a field that does not exist and the file would be rejected.
        resolved = dict(failure)
        if "field" in failure:
            resolved["field"] = resolve(failure["field"])
        if isinstance(failure.get("reason_fields"), list):
            resolved["reason_fields"] = [resolve(k) for k in failure["reason_fields"]]
        output["failure"] = resolved
    scores = {
        name: {**score, "from": resolve(score.get("from"))} if isinstance(score, dict) else score
        for name, score in (data.get("scores") or {}).items()
    }
    return {**data, "output": output, "scores": scores}


def _beside(path: Path, name: str, *, what: str) -> Path:
    """The file ``name`` (an examples or schema file) beside the metric file ``path``,
    which it may not leave (no absolute path, no ``..`` out of the folder, no symbolic
    link out of it)."""
    folder = path.parent.resolve()
    target = (folder / name).resolve()
    if Path(name).is_absolute() or not target.is_relative_to(folder):
        raise InvalidMetricSpec(f"{what} {name!r} is outside the metric's folder",
                                path=str(path))
    if not target.is_file():
        raise InvalidMetricSpec(f"{what} {name!r} does not exist", path=str(path))
    return target


def _render_examples(examples: ExamplesSpec, raw: bytes, *, path: Path) -> str:
    items = yaml.safe_load(raw)
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise InvalidMetricSpec(f"{examples.file} must be a list of mappings", path=str(path))
    try:
        return examples.separator.join(
            examples.template.format_map({**item, "n": n}) for n, item in enumerate(items, 1)
        )
    except (KeyError, ValueError, IndexError, AttributeError) as exc:
        raise InvalidMetricSpec(f"{examples.file}: bad example: {exc}", path=str(path)) from None


def _describe(exc: ValidationError) -> str:
    error = exc.errors()[0]
    location = ".".join(str(part) for part in error["loc"])
    return f"{location}: {error['msg']}" if location else str(error["msg"])
