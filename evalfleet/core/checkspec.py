"""Checks: the metric kind scored by code, as a metric file writes it. Pure.

A metric file with ``kind: check`` lists named checks instead of judge messages. Each
check reads one sample value (``field``, the output unless named) and gives a score
and a reason (a trajectory check reads the sample's ``trajectory`` instead: the tools it
called, their arguments, its steps): the built-in checks pass or fail (a binary score,
stored 1 or 0); a team's own check (``team``) is a function installed with the fleet
that returns a score on its ``scale``. Every check is its own score and its own verdict, keyed by
the check's version (a hash of its parameters and any file it reads) where a judged
verdict has its prompt version, and by ``check:<name>`` where it has its judge model.

Everything that can be refused is refused when the metric loads, naming the check:
a pattern RE2 will not compile, a schema that is not a schema, nests deeper than
:data:`MAX_SCHEMA_DEPTH` or points outside itself (a worker never fetches a URL).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from evalfleet.core.regex import compile_linear

#: Prefix of the judge model a check's verdicts are stored under (``check:<name>``).
CHECK_MODEL_PREFIX = "check:"

#: Deepest nesting of objects and arrays a JSON Schema may have. Validating recurses
#: through the schema; real schemas stay far below this.
MAX_SCHEMA_DEPTH = 64

_NAME = re.compile(r"[a-z][a-z0-9_]{0,62}")

#: Longest a team check may be given, in seconds.
MAX_TIMEOUT_S = 300.0

#: What ``normalise`` may name: how texts are made comparable before comparing.
Normalisation = Literal["case", "whitespace", "punctuation", "numbers"]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    field: str = "output"
    """The sample value checked: ``output``, ``input``, ``reference``, ``fields.<key>``..."""


class JsonValid(_Spec):
    """Passes when the value is one JSON document."""

    check: Literal["json_valid"]


class JsonSchema(_Spec):
    """Passes when the value is JSON that validates against a JSON Schema."""

    check: Literal["json_schema"]
    schema_: dict[str, Any] | bool | None = Field(default=None, alias="schema")
    """The schema, written inline."""
    schema_file: str | None = None
    """Or a JSON file beside the metric file holding it."""

    @model_validator(mode="after")
    def _one_schema(self) -> JsonSchema:
        if (self.schema_ is None) == (self.schema_file is None):
            raise ValueError("give exactly one of 'schema' and 'schema_file'")
        if self.schema_ is not None:
            check_schema_document(self.schema_)
        return self


class Pattern(_Spec):
    """``matches`` passes when the pattern occurs in the value; ``never_matches`` when
    it does not. Patterns are RE2 (linear time whatever the text)."""

    check: Literal["matches", "never_matches"]
    pattern: str
    """The regular expression (RE2 syntax: no lookaround, no backreferences)."""

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            compile_linear(value)
        except ValueError as exc:
            raise ValueError(f"pattern {value!r} is refused: {exc}") from None
        return value


class _Comparison(_Spec):
    reference: str = "reference"
    """The sample value compared against."""
    value: str | None = None
    """A literal compared against instead of ``reference``."""


class Equals(_Comparison):
    """Passes when the value equals the reference, after ``normalise``."""

    check: Literal["equals"]
    normalise: tuple[Normalisation, ...] = ()
    """``case``, ``whitespace``, ``punctuation``, ``numbers`` (``1,000.0`` is ``1000``)."""


class Contains(_Spec):
    """``contains_all`` passes when every text of ``values`` occurs in the value;
    ``contains_any`` when one does."""

    check: Literal["contains_all", "contains_any"]
    values: tuple[str, ...] = Field(min_length=1)
    """The texts looked for."""
    normalise: tuple[Normalisation, ...] = ()
    """As for ``equals``, applied to both sides."""


class Numeric(_Comparison):
    """Passes when the value's number is within ``tolerance`` of the reference's."""

    check: Literal["numeric"]
    tolerance: float = Field(default=0.0, ge=0.0)
    """Largest absolute difference that passes."""
    relative: float = Field(default=0.0, ge=0.0)
    """Or largest difference as a share of the reference (0.01: one per cent)."""


class Length(_Spec):
    """Passes when the value's length is within ``min`` and ``max``."""

    check: Literal["length"]
    count: Literal["characters", "tokens"] = "characters"
    """What is counted; tokens are evalfleet's own estimate (characters / 4)."""
    min: int | None = Field(default=None, ge=0)
    max: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _bounded(self) -> Length:
        if self.min is None and self.max is None:
            raise ValueError("give 'min', 'max' or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError("'min' is above 'max'")
        return self


class Similar(_Comparison):
    """Passes when the value is at least ``min`` similar to the reference (0 to 1, by
    rapidfuzz's edit-distance ratios), after ``normalise``."""

    check: Literal["similar"]
    min: float = Field(ge=0.0, le=1.0)
    """Lowest similarity that passes."""
    method: Literal["ratio", "partial", "token_sort", "token_set"] = "ratio"
    """``ratio``: the whole texts; ``partial``: the best match of the shorter in the
    longer; ``token_sort``: words sorted first; ``token_set``: the shared words."""
    normalise: tuple[Normalisation, ...] = ()
    """As for ``equals``, applied to both sides."""


class JsonEquals(_Comparison):
    """Passes when the value and the reference are equal JSON documents (objects
    compared whatever their key order; ``true`` is not ``1``)."""

    check: Literal["json_equals"]
    tolerance: float = Field(default=0.0, ge=0.0)
    """Largest absolute difference between two numbers that still counts as equal."""


class SqlValid(_Spec):
    """Passes when the value parses as SQL of ``dialect`` (sqlglot), each statement
    one of ``statements`` when given."""

    check: Literal["sql_valid"]
    dialect: str = ""
    """sqlglot's dialect name (``postgres``, ``mysql``, ``bigquery``...); empty: its own."""
    statements: tuple[str, ...] = ()
    """The statement kinds allowed, by sqlglot's name in lower case (``select``,
    ``insert``, ``update``, ``delete``...); empty: any."""

    @field_validator("dialect")
    @classmethod
    def _known_dialect(cls, value: str) -> str:
        from sqlglot.dialects.dialect import Dialect  # only metrics that check SQL need it

        if value and value not in Dialect.classes:
            raise ValueError(f"sqlglot knows no dialect {value!r}")
        return value


class Team(_Spec):
    """A team's own function, installed with the fleet: it takes the sample and returns
    ``(score, reason)``, run in a process that is killed at ``timeout_s``."""

    check: Literal["team"]
    function: str | None = Field(default=None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    """``module:function``."""
    entry_point: str | None = None
    """Or the name of an entry point in the ``evalfleet.checks`` group."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments passed to the function."""
    scale: tuple[float, float] = (0.0, 1.0)
    """Range of the score it returns (stored normalised to 0..1)."""
    binary: bool = False
    """The score is pass (the scale's top, or true) or fail (its bottom, or false)."""
    timeout_s: float = Field(default=2.0, gt=0.0, le=MAX_TIMEOUT_S)
    """Longest it may run; past it its process is killed and the verdict is failed."""

    @model_validator(mode="after")
    def _one_function(self) -> Team:
        if (self.function is None) == (self.entry_point is None):
            raise ValueError("give exactly one of 'function' and 'entry_point'")
        if not self.scale[0] < self.scale[1]:
            raise ValueError("'scale' must go from low to high")
        return self

    @property
    def reference(self) -> str:
        """How the function is named: ``entry point NAME`` or ``module:function``."""
        return self.function or f"entry point {self.entry_point}"


class _TrajectorySpec(BaseModel):
    """A check of the sample's ``trajectory`` (it reads no ``field``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


#: How ``tool_sequence`` compares the calls made with the expected ones.
SequenceMode = Literal["strict", "unordered", "subset", "superset"]


class ToolSequence(_TrajectorySpec):
    """Passes when the tools called, by name, match ``expected`` as ``mode`` says."""

    check: Literal["tool_sequence"]
    expected: tuple[str, ...]
    """The expected calls' tool names, in order."""
    mode: SequenceMode = "strict"
    """``strict``: the same calls in the same order; ``unordered``: the same calls in any
    order; ``subset``: every expected call made (others may be too); ``superset``: no
    call outside the expected ones (some may be missing). Calls count: two expected
    ``search`` calls need two."""


class ToolArguments(_TrajectorySpec):
    """Passes when every call's arguments validate against the offered tool's JSON
    schema (its ``parameters``); a call to a tool that was not offered fails."""

    check: Literal["tool_arguments"]


class ForbiddenTools(_TrajectorySpec):
    """Passes when no call is to one of ``tools``."""

    check: Literal["forbidden_tools"]
    tools: tuple[str, ...] = Field(min_length=1)
    """The tools never to be called."""


class RepeatedCalls(_TrajectorySpec):
    """Fails when the same tool is called with the same arguments ``times`` times in a
    row (other steps between the calls do not break the row; another call does)."""

    check: Literal["repeated_calls"]
    times: int = Field(default=5, ge=2)
    """How many identical calls in a row fail."""


class MaxSteps(_TrajectorySpec):
    """Passes when the trajectory has at most ``max`` steps (of ``types`` only, when
    given)."""

    check: Literal["max_steps"]
    max: int = Field(ge=0)
    types: tuple[Literal["model", "tool", "retrieval", "handoff"], ...] = ()
    """The step types counted; every step when empty."""


class MaxToolErrors(_TrajectorySpec):
    """Passes when at most ``max`` tool calls ended in an error."""

    check: Literal["max_tool_errors"]
    max: int = Field(default=0, ge=0)


#: The checks of a trajectory.
TrajectoryCheck = (ToolSequence | ToolArguments | ForbiddenTools | RepeatedCalls | MaxSteps
                   | MaxToolErrors)

#: Every check a metric may declare, as written.
AnyCheck = (JsonValid | JsonSchema | Pattern | Equals | Contains | Numeric | Length | Similar
            | JsonEquals | SqlValid | Team | TrajectoryCheck)

CheckSpec = Annotated[AnyCheck, Field(discriminator="check")]


@dataclass(frozen=True)
class LoadedCheck:
    """One check of a loaded metric, with what its files add."""

    name: str
    """The check's name: its score's name, and ``check:<name>`` its judge model."""
    spec: AnyCheck
    """As written."""
    version: str
    """A hash of its parameters and of the files it reads."""
    schema: dict[str, Any] | bool | None = None
    """``json_schema``: the schema, read from its file when it has one."""

    @property
    def judge_model(self) -> str:
        """What its verdicts have for a judge model."""
        return check_model(self.name)

    @property
    def binary(self) -> bool:
        """Whether its score is pass or fail (every built-in check's is)."""
        return not isinstance(self.spec, Team) or self.spec.binary


def derive_check_scores(data: dict[str, Any]) -> dict[str, Any]:
    """A check metric's verdict fields and scores, one per check, as a metric file's raw
    data would write them (a judged metric's ``data`` comes back unchanged).

    Built-in checks and binary team checks are booleans (proportions to the alert
    engine); other team checks are numbers on their ``scale``.

    Raises:
        ValueError: When a check metric writes ``output`` or ``scores`` itself, or a
            check's name could not name a score.
    """
    checks = data.get("checks")
    if data.get("kind") != "check" or not isinstance(checks, dict):
        if checks and data.get("kind", "judge") == "judge":
            raise ValueError("'checks' belong to a metric of kind: check")
        return data
    if "output" in data or "scores" in data:
        raise ValueError("a check metric has no 'output' or 'scores': each check is a score")
    if not checks:
        raise ValueError("a check metric needs at least one check")
    fields: dict[str, Any] = {}
    scores: dict[str, Any] = {}
    for name, check in checks.items():
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError(f"check name {name!r} must be lower case letters, digits "
                             "and _, starting with a letter")
        written = check if isinstance(check, dict) else {}
        scale = written.get("scale", [0.0, 1.0])
        if written.get("check") == "team" and not written.get("binary"):
            low, high = scale if isinstance(scale, list | tuple) and len(scale) == 2 else (0, 1)
            fields[name] = {"type": "number", "minimum": low, "maximum": high}
            scores[name] = {"from": name, "scale": [low, high]}
        else:
            fields[name] = {"type": "boolean"}
            scores[name] = {"from": name}
    return {**data, "output": {"format": "json", "fields": fields}, "scores": scores}


def check_model(name: str) -> str:
    """The judge model the verdicts of check ``name`` are stored under."""
    return f"{CHECK_MODEL_PREFIX}{name}"


def is_check_model(judge_model: str) -> bool:
    """Whether verdicts of ``judge_model`` were given by a check, not a judge."""
    return judge_model.startswith(CHECK_MODEL_PREFIX)


def check_version(spec: BaseModel, *, files: bytes = b"", length: int = 12) -> str:
    """A check's version: a hash of its parameters as written and of the files it reads."""
    written = json.dumps(spec.model_dump(mode="json", by_alias=True, exclude_none=True),
                         sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(written.encode("utf-8") + b"\0" + files).hexdigest()[:length]


def check_schema_document(schema: Any) -> None:
    """Refuse a JSON Schema a worker could not use safely.

    Raises:
        ValueError: When it nests deeper than :data:`MAX_SCHEMA_DEPTH`, has a ``$ref``
            outside itself (only ``#...`` references: nothing is fetched), or is not a
            valid schema of the draft it declares.
    """
    if not isinstance(schema, dict | bool):
        raise ValueError("a JSON Schema is an object or a boolean")
    depth = 0
    for level, value in _walk(schema):
        depth = max(depth, level)
        if depth > MAX_SCHEMA_DEPTH:
            raise ValueError(f"the schema nests deeper than {MAX_SCHEMA_DEPTH} levels")
        ref = value.get("$ref") if isinstance(value, dict) else None
        if isinstance(ref, str) and not ref.startswith("#"):
            raise ValueError(f"$ref {ref!r} points outside the schema: only local "
                             "references ('#/...') are allowed, a worker fetches nothing")
    import jsonschema  # the kernel's other users never pay for it unless a schema loads

    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(part) for part in exc.absolute_path) or "(top)"
        raise ValueError(f"not a valid JSON Schema at {where}: {exc.message}") from None


def _walk(value: Any) -> Iterator[tuple[int, Any]]:
    """Every object and array in ``value`` with its depth, without recursing."""
    stack = [(1, value)]
    while stack:
        level, item = stack.pop()
        yield level, item
        children = item.values() if isinstance(item, dict) else item
        if isinstance(item, dict | list):
            stack.extend((level + 1, child) for child in children
                         if isinstance(child, dict | list))
