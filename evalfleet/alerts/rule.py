"""Alert rules: the data model of the rules file and its loader.

A rules file (YAML) holds receivers, defaults merged into every rule, the false
discovery rate shared by all tests of one evaluation cycle, and the rules. Each
rule watches one stored score of one metric; its score kind (continuous,
binary, ordinal) comes from the metric file, so the right test is chosen
without the rule saying so. Everything is checked at load: a bad rule is
reported with the file, the rule and the field.

A rule is of one of two kinds. An ``app`` rule (the default) watches the app's
production scores. A ``judge_drift`` rule watches the judge itself: the canary
series of one score (agreement with the gold labels, and bias; see
``evalfleet.core.gold``) against the last calibration run of its metric,
through the same tests, false discovery rate, ``for`` and recovery. Agreement
is tested as a proportion for a binary score and as a continuous value otherwise,
and bias is tested in both directions. A judge_drift rule has no segments and
does not inherit the file's ``baseline``, ``segment_by`` or ``filters`` defaults.

A ``review_agreement`` rule watches the judge against people: its live agreement with
the review queue's labels of random items (``evalfleet.alerts.review_agreement``), per judge
model, against its own trailing level (a ``trailing`` baseline) and below a floor (the
``threshold``), through the same tests. It has no ``segment_by`` or ``filters``, inherits
none of those three defaults either, and watches only a fall (``direction: decrease``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from evalfleet.core.canary import canary_series_names
from evalfleet.core.durations import parse_duration
from evalfleet.core.errors import InvalidAlertRule, UnknownMetric
from evalfleet.core.metric import MetricRegistry, ScoreKind
from evalfleet.core.scales import score_kind

#: The rules shipped with evalfleet, used when no file is configured.
DEFAULT_RULES_FILE = "rules.yaml"

#: Attribute keys and label names: what Prometheus and Alertmanager accept as a label name.
_LABEL_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"

#: Defaults of the rules file a judge_drift rule does not inherit (they are about the
#: app's traffic, which canaries are not part of).
APP_ONLY_DEFAULTS = frozenset({"baseline", "segment_by", "filters"})

#: Labels the engine sets itself; a rule may not set them.
RESERVED_LABELS = frozenset({"alertname", "rule", "metric", "score", "severity", "segment"})

RuleKind = Literal["app", "judge_drift", "review_agreement"]
Direction = Literal["decrease", "increase"]
Mode = Literal["threshold", "baseline", "both"]
Test = Literal["sequential", "fixed"]
NoData = Literal["no_data", "ok", "keep_state"]


def _duration(value: Any) -> Any:
    """Read a duration (:mod:`evalfleet.core.durations`) or a number of seconds as a timedelta.

    Args:
        value: What the file holds.

    Returns:
        A timedelta, or ``value`` unchanged for pydantic to judge when it is neither.

    Raises:
        ValueError: For a string that is not a duration.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return timedelta(seconds=value)
    if isinstance(value, str):
        return parse_duration(value)
    return value


Duration = Annotated[timedelta, BeforeValidator(_duration)]
LabelName = Annotated[str, Field(pattern=_LABEL_NAME)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class TrailingBaseline(_Model):
    """Compare with the same segment over a trailing window before the current one."""

    type: Literal["trailing"] = "trailing"
    """Discriminator."""

    window: Duration = timedelta(days=1)
    """Length of the baseline window."""

    gap: Duration = timedelta(0)
    """Time left out between the baseline's end and the current window's start, so a
    slow drift does not leak into the baseline."""

    exclude_firing: bool = True
    """Leave out samples of periods when this rule fired for a segment they belong to,
    so a long incident does not become the new normal."""

    exclude_firing_max: Duration | None = timedelta(hours=6)
    """Longest a firing period is left out, from its start: later samples count in the
    baseline again, so an alert always has a way back (a false alarm against a baseline
    that happened to run high resolves once the baseline holds the segment's steady
    values; an incident that lasts longer becomes the new normal). None: no cap, left
    out until resolved (``evalfleet alerts rebaseline`` is then the way back)."""


class PinnedBaseline(_Model):
    """Compare each segment with the same segment at another value of one attribute."""

    type: Literal["pinned"]
    """Discriminator."""

    key: LabelName
    """The attribute, e.g. ``prompt_version``; it is always segmented on."""

    value: str
    """The value compared with, or ``previous``: for each value, the one first seen
    just before it (the prompt version it replaced)."""

    window: Duration = timedelta(days=7)
    """How far back the baseline's samples are looked for."""


class CalibrationBaseline(_Model):
    """Compare canary series with the last calibration run of the rule's metric
    (``evalfleet calibrate``): the only baseline of a judge_drift rule."""

    type: Literal["calibration"] = "calibration"
    """Discriminator."""


class Recovery(_Model):
    """Hysteresis: what it takes for a firing alert to resolve."""

    for_count: int = Field(default=3, ge=1, alias="for")
    """Consecutive clear evaluations needed."""

    margin: float = Field(default=0.02, ge=0, le=1)
    """How far inside the good side the point estimate must be: above the threshold by
    this much, and a drop from the baseline smaller than ``min_effect`` by this much."""


class JudgeCheck(_Model):
    """Whether people's labels confirm an app alert's drop (``evalfleet.alerts.judgecheck``):
    the window and the baseline each corrected by the labels of a pool ending where it
    ends."""

    enabled: bool = True
    """False: notifications and the page say nothing of labels."""

    label_window: Duration | None = None
    """How far back from each period's end its labels are pooled. None (the default): the
    period itself, so each period's own labels correct it and nothing is assumed about the
    judge outside it (a 10-minute window rarely has enough). Longer: more labels, and the
    assumption that the judge's bias is steady over the pool; a pool reaching back past
    the other period's end shares labels with it (counted in the interval)."""

    min_labels: int = Field(default=100, ge=10)
    """Fewest labelled random items in each pool to say anything ("too few labels")."""


class IncidentSpec(_Model):
    """How a sequential rule's incidents name their cause (``evalfleet.alerts.incident``)."""

    explain_by: tuple[LabelName, ...] = ("judge_model", "prompt_version")
    """Attributes outside ``segment_by`` also ranked as the drop's cause: a sample
    attribute (``prompt_version``, ``deploy``) or one of the verdict's own
    :data:`VERDICT_EXPLAINERS` (``judge_model``, ``judge_prompt_version``). Read for the
    incidents' segments over the rule's window, only in cycles that have an incident;
    those in ``segment_by`` are ranked along the segment tree already."""


#: ``explain_by`` names read from the verdict's own columns, not its attributes.
VERDICT_EXPLAINERS = {"judge_model": "judge_model", "judge_prompt_version": "prompt_version"}


class Annotations(_Model):
    """Text for people; ``{segment}``, ``{mean}``, ``{baseline_mean}``, ``{effect}``,
    ``{n}``, ``{p_value}`` and ``{threshold}`` are filled in."""

    model_config = ConfigDict(extra="allow", frozen=True)

    summary: str = "{rule}: {score} of {metric} is {direction}d in {segment}"
    """One line, shown as the notification's title."""

    runbook: str | None = None
    """Link to what to do (sent as ``runbook_url``)."""


class AlertRule(_Model):
    """One alert rule, as written (defaults already merged in)."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,100}$")
    """Unique name; the alert's ``alertname``."""

    kind: RuleKind = "app"
    """``app``: the app's production scores. ``judge_drift``: the judge's agreement with
    the gold labels on canary jobs, against the last calibration (see the module
    docstring); while it fires, every app alert on its metric says judge drift is
    suspected. ``review_agreement``: the judge's agreement with reviewers' labels of
    the review queue's random items, against its trailing level or a floor."""

    metric: str
    """The metric whose verdicts are watched, e.g. ``rag_qa``."""

    score: str
    """The stored score of that metric, e.g. ``faithfulness``."""

    direction: Direction = "decrease"
    """``decrease``: lower is worse (the usual); ``increase``: higher is worse."""

    segment_by: tuple[LabelName, ...] = ()
    """Sample attributes to split by. Each prefix is a level: with ``[app, route]`` the
    rule tests all traffic, each app, and each app and route."""

    filters: dict[LabelName, str | tuple[str, ...]] = Field(default_factory=dict)
    """Only samples whose attribute equals the value (or one of the values)."""

    window: Duration = timedelta(minutes=10)
    """The current window, on the samples' own timestamps."""

    interval: Duration = timedelta(minutes=1)
    """How often the rule is evaluated."""

    min_samples: int = Field(default=30, ge=2)
    """Fewer samples in a segment's window (or its baseline) mean insufficient data."""

    min_effect: float = Field(default=0.05, ge=0, le=1)
    """Smallest change from the baseline worth an alert, on the 0..1 score scale."""

    mode: Mode = "baseline"
    """``threshold``, ``baseline``, or ``both`` (either test can breach)."""

    threshold: float | None = Field(default=None, ge=0, le=1)
    """The line on the 0..1 scale; it fires when the confidence bound is past it."""

    baseline: TrailingBaseline | PinnedBaseline | CalibrationBaseline = Field(
        default_factory=TrailingBaseline, discriminator="type",
    )
    """What the current window is compared with (judge_drift: ``calibration``)."""

    for_count: int = Field(default=3, ge=1, alias="for")
    """Consecutive breaching evaluations before it fires (pending until then)."""

    recovery: Recovery = Recovery()
    """What it takes to resolve."""

    no_data: NoData = "no_data"
    """When the rule's traffic stops: ``no_data`` (its own notification), ``ok``, or
    ``keep_state``. A firing alert stays firing while there is no data to clear it."""

    severity: str = Field(default="warning", pattern=r"^[a-z]+$")
    """Severity label."""

    labels: dict[LabelName, str] = Field(default_factory=dict)
    """Extra labels, for routing."""

    annotations: Annotations = Annotations()
    """Summary, runbook and any other text."""

    receivers: tuple[str, ...] | None = None
    """Receiver names; None means the default receivers."""

    renotify: Duration = timedelta(hours=4)
    """While firing, notify again this often."""

    max_segments: int = Field(default=500, ge=1)
    """Segments tested per evaluation; the ones with most samples are kept."""

    judge_check: JudgeCheck = JudgeCheck()
    """Whether people's labels confirm a firing app alert (see :class:`JudgeCheck`)."""

    incident: IncidentSpec = IncidentSpec()
    """How a sequential rule's incidents rank their causes (see :class:`IncidentSpec`)."""

    test: Test | None = None
    """How a drop is decided. ``sequential`` (the default of an app rule): an e-detector
    per segment and test reads each cycle's new samples (``evalfleet.alerts.edetector``)
    and bounds the rule's false alarms over time (:attr:`run_length`). ``fixed`` (the only
    choice of judge_drift and review_agreement rules): a fixed-sample test of the window
    every cycle, all of a cycle's tests adjusted together (Benjamini-Hochberg)."""

    run_length: Duration = timedelta(days=30)
    """A sequential rule's average time to a false alarm, all its segments and tests
    together, while nothing drops."""

    @model_validator(mode="before")
    @classmethod
    def _drift_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("kind") == "judge_drift":
            return {"baseline": {"type": "calibration"}, **data}
        return data

    @model_validator(mode="after")
    def _check(self) -> AlertRule:
        drift = self.kind == "judge_drift"
        if drift != isinstance(self.baseline, CalibrationBaseline):
            raise ValueError("a 'calibration' baseline goes with kind 'judge_drift', and only "
                             "with it")
        if drift and (self.segment_by or self.filters):
            raise ValueError("a judge_drift rule watches canaries: no 'segment_by' or "
                             "'filters'")
        if self.kind == "review_agreement":
            self._check_review_agreement()
        if self.kind != "app" and self.test == "sequential":
            raise ValueError(f"a {self.kind} rule's test is 'fixed'")
        if self.run_length < self.interval:
            raise ValueError("'run_length' must be at least one 'interval'")
        if self.mode in ("threshold", "both") and self.threshold is None:
            raise ValueError(f"mode {self.mode!r} needs a 'threshold'")
        if len(set(self.incident.explain_by)) != len(self.incident.explain_by):
            raise ValueError("'incident.explain_by' names an attribute twice")
        if len(set(self.segment_by)) != len(self.segment_by):
            raise ValueError("'segment_by' names a key twice")
        if self.window <= timedelta(0) or self.interval <= timedelta(0):
            raise ValueError("'window' and 'interval' must be positive")
        label_window = self.judge_check.label_window
        if label_window is not None and label_window <= timedelta(0):
            raise ValueError("'judge_check.label_window' must be positive")
        if self.renotify < self.interval:
            raise ValueError("'renotify' must be at least one 'interval'")
        reserved = RESERVED_LABELS & (set(self.labels) | set(self.segment_keys))
        if reserved:
            raise ValueError(f"labels {sorted(reserved)} are set by the engine")
        return self

    def _check_review_agreement(self) -> None:
        if self.segment_by or self.filters:
            raise ValueError("a review_agreement rule is split by judge model itself: no "
                             "'segment_by' or 'filters'")
        if not isinstance(self.baseline, TrailingBaseline):
            raise ValueError("a review_agreement rule's baseline is 'trailing'")
        if self.direction != "decrease":
            raise ValueError("a review_agreement rule watches agreement falling: "
                             "'direction' is 'decrease'")

    @property
    def segment_keys(self) -> tuple[str, ...]:
        """The attributes actually segmented on: a pinned baseline's key comes first."""
        if isinstance(self.baseline, PinnedBaseline):
            rest = tuple(key for key in self.segment_by if key != self.baseline.key)
            return (self.baseline.key, *rest)
        return self.segment_by

    @property
    def filter_values(self) -> dict[str, tuple[str, ...]]:
        """``filters`` with each as the tuple of values it keeps (a filter written as one
        value keeps that one)."""
        return {key: (value,) if isinstance(value, str) else tuple(value)
                for key, value in self.filters.items()}

    @property
    def explain_keys(self) -> tuple[str, ...]:
        """The ``incident.explain_by`` attributes the segment tree does not rank already."""
        return tuple(key for key in self.incident.explain_by if key not in self.segment_keys)

    @property
    def series(self) -> str:
        """The stored score series the rule reads: the score itself, or for a judge_drift
        rule its canary agreement series."""
        if self.kind == "judge_drift":
            return canary_series_names(self.score)[0]
        return self.score

    @property
    def bias_series(self) -> str | None:
        """A judge_drift rule's canary bias series; None for an app rule."""
        return canary_series_names(self.score)[1] if self.kind == "judge_drift" else None

    @property
    def sequential(self) -> bool:
        """True when the rule's segments are watched by the sequential detector."""
        return (self.test or ("sequential" if self.kind == "app" else "fixed")) == "sequential"

    @property
    def uses_threshold(self) -> bool:
        """True when the threshold test runs."""
        return self.mode in ("threshold", "both")

    @property
    def uses_baseline(self) -> bool:
        """True when the baseline test runs."""
        return self.mode in ("baseline", "both")


class ReceiverSpec(_Model):
    """Where notifications go."""

    type: Literal["alertmanager", "webhook", "slack"]
    """``alertmanager`` (v2 API), ``webhook`` (Alertmanager's v4 webhook shape, HMAC
    signed) or ``slack`` (an incoming webhook)."""

    url: str = Field(pattern=r"^https?://")
    """Alertmanager's base URL, or the webhook's full URL."""

    default: bool = False
    """Notified by rules that name no receivers."""


class RulesFile(_Model):
    """The content of a rules file, as written."""

    false_discovery_rate: float = Field(default=0.05, gt=0, lt=0.5)
    """Benjamini-Hochberg level over all tests of one evaluation cycle; confidence
    bounds are drawn at one minus this."""

    receivers: dict[str, ReceiverSpec] = Field(default_factory=dict)
    """Receivers by name."""

    defaults: dict[str, Any] = Field(default_factory=dict)
    """Fields merged into every rule (a rule's own value wins)."""

    rules: tuple[dict[str, Any], ...] = ()
    """The rules, checked one by one as :class:`AlertRule`."""


@dataclass(frozen=True)
class Rule:
    """A loaded rule: its spec and the kind of score it watches."""

    spec: AlertRule
    """The rule as written."""

    score_kind: ScoreKind
    """How the score is tested: from the metric file's verdict field."""

    @property
    def name(self) -> str:
        """The rule's name."""
        return self.spec.name


@dataclass(frozen=True)
class RuleSet:
    """Everything the engine needs from a rules file."""

    rules: tuple[Rule, ...]
    """The rules, in file order."""

    receivers: dict[str, ReceiverSpec]
    """Receivers by name (the settings' Alertmanager included)."""

    false_discovery_rate: float
    """See :attr:`RulesFile.false_discovery_rate`."""

    path: str
    """Where the rules came from."""

    def receivers_of(self, rule: Rule) -> tuple[str, ...]:
        """The receiver names ``rule`` notifies."""
        if rule.spec.receivers is not None:
            return rule.spec.receivers
        return tuple(name for name, spec in self.receivers.items() if spec.default)


def load_rules(
    path: Path | None, *, registry: MetricRegistry,
    extra_receivers: dict[str, ReceiverSpec] | None = None,
) -> RuleSet:
    """Load and check a rules file.

    Args:
        path: The YAML file; None for the rules shipped with evalfleet.
        registry: The metrics rules may refer to.
        extra_receivers: Receivers from the settings (the Alertmanager URL).

    Returns:
        The rules.

    Raises:
        InvalidAlertRule: Naming the file, the rule and the field that is wrong.
    """
    shown = str(path) if path is not None else f"evalfleet/alerts/{DEFAULT_RULES_FILE}"
    try:
        raw = (path.read_bytes() if path is not None
               else resources.files("evalfleet.alerts").joinpath(DEFAULT_RULES_FILE).read_bytes())
        data = yaml.safe_load(raw)
    except OSError as exc:
        raise InvalidAlertRule(f"cannot read: {exc.strerror}", path=shown) from None
    except yaml.YAMLError as exc:
        raise InvalidAlertRule(f"not valid YAML: {exc}", path=shown) from None
    try:
        document = RulesFile.model_validate(data or {})
    except ValidationError as exc:
        reason, location = _describe(exc)
        raise InvalidAlertRule(reason, path=shown, field=location) from None
    receivers = {**document.receivers, **(extra_receivers or {})}
    rules: list[Rule] = []
    for position, written in enumerate(document.rules):
        rule = _load_rule(written, document.defaults, position=position, path=shown,
                          registry=registry, receivers=receivers)
        if any(other.name == rule.name for other in rules):
            raise InvalidAlertRule("a rule of this name comes earlier", path=shown,
                                   rule=rule.name, field="name")
        rules.append(rule)
    return RuleSet(rules=tuple(rules), receivers=receivers,
                   false_discovery_rate=document.false_discovery_rate, path=shown)


def _load_rule(
    written: dict[str, Any], defaults: dict[str, Any], *, position: int, path: str,
    registry: MetricRegistry, receivers: dict[str, ReceiverSpec],
) -> Rule:
    name = written.get("name") if isinstance(written.get("name"), str) else f"rules[{position}]"
    if written.get("kind") in ("judge_drift", "review_agreement"):
        defaults = {k: v for k, v in defaults.items() if k not in APP_ONLY_DEFAULTS}
    try:
        spec = AlertRule.model_validate({**defaults, **written})
    except ValidationError as exc:
        reason, field = _describe(exc)
        raise InvalidAlertRule(reason, path=path, rule=name, field=field) from None
    try:
        metric = registry.get(spec.metric)
    except UnknownMetric as exc:
        raise InvalidAlertRule(str(exc), path=path, rule=name, field="metric") from None
    if spec.score not in metric.spec.scores:
        known = ", ".join(sorted(metric.spec.scores))
        raise InvalidAlertRule(f"metric {spec.metric!r} has no score {spec.score!r} "
                               f"(it has: {known})", path=path, rule=name, field="score")
    kind = score_kind(metric, spec.score)
    if spec.kind != "app" and kind == "ordinal":
        kind = "continuous"  # agreement with a 1-5 label: 1 - |judge - label| / 4
    if kind == "binary" and spec.threshold is not None and spec.threshold in (0.0, 1.0):
        raise InvalidAlertRule("a proportion's threshold must lie strictly between 0 and 1",
                               path=path, rule=name, field="threshold")
    for receiver in spec.receivers or ():
        if receiver not in receivers:
            known = ", ".join(sorted(receivers)) or "none"
            raise InvalidAlertRule(f"unknown receiver {receiver!r} (known: {known})",
                                   path=path, rule=name, field="receivers")
    return Rule(spec=spec, score_kind=kind)


def _describe(exc: ValidationError) -> tuple[str, str | None]:
    error = exc.errors()[0]
    location = ".".join(str(part) for part in error["loc"]) or None
    message = str(error["msg"]).removeprefix("Value error, ")
    return message, location
