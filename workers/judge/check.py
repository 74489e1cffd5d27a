"""``evalfleet judge check``: probe the configured judge the way the fleet will use it.

Through the fleet (:class:`~workers.judge.fleet.JudgeFleet`) around the worker's
provider, in order: the model list (reachable, authenticated, the model served); one
tiny request in the configured response format, which the fleet's step-down lowers as
far as the endpoint and model need (each refused mode is a probe); then one real prompt
of each metric (the first sample of its bundled gold set), rendered and sent in the
mode the step-down reached with its ``prompt_cache_key`` (which the fleet's drop layer
sends again without it when the endpoint refuses it), and parsed as a worker would,
with its latency, token usage and cached tokens. Every probe that shows the judge will
not work is a problem, in one line. Nothing here speaks HTTP or re-implements a layer:
what the check reports is what the fleet's layers did.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from evalfleet.core.errors import JudgeError, JudgeRejected
from evalfleet.core.gold import bundled_gold, load_gold
from evalfleet.core.metric import Metric
from workers.judge.base import JudgeReply, JudgeRequest, prompt_cache_key
from workers.judge.fleet import JudgeFleet
from workers.judge.formats import mode_of, shaped
from workers.judge.http_status import prompt_too_long
from workers.renderer import render_messages
from workers.verdicts import ParseFailure, parse_verdict, response_format_for
from workers.verdicts.schema import MODES, ResponseFormat

#: The tiny verdict each response-format probe asks for.
_TINY_SCHEMA = {"type": "object", "properties": {"score": {"type": "number"}},
                "required": ["score"], "additionalProperties": False}

#: The tiny request's argument in each mode (text: none).
_FORMATS: dict[ResponseFormat, dict[str, Any] | None] = {
    "json_schema": {"type": "json_schema", "json_schema": {
        "name": "probe", "strict": True, "schema": _TINY_SCHEMA}},
    "json_object_schema": {"type": "json_object", "schema": _TINY_SCHEMA},
    "json_object": {"type": "json_object"},
    "text": None,
}


@dataclass(frozen=True)
class Probe:
    """One probe of the judge and what came of it."""

    what: str
    """``models``, ``format <mode>`` or ``metric <name>``."""
    ok: bool
    detail: str
    problem: str | None = None
    """Why the judge will not work as configured, in one line; None when it will."""
    latency_ms: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None


@dataclass
class CheckReport:
    """Every probe of one judge endpoint."""

    endpoint: str
    model: str
    probes: list[Probe] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        """One line per problem found."""
        return [probe.problem for probe in self.probes if probe.problem]

    def as_json(self) -> dict[str, Any]:
        """The report as plain data (``--json``)."""
        return {"endpoint": self.endpoint, "model": self.model,
                "probes": [asdict(probe) for probe in self.probes], "problems": self.problems}


def check_judge(fleet: JudgeFleet, *, model: str, metrics: Sequence[Metric],
                model_for: dict[str, str], timeout_s: float = 60.0) -> CheckReport:
    """Probe the judge of ``fleet`` for ``model`` and each metric's judge model.

    Args:
        fleet: The worker's provider in the fleet's layers
            (:func:`workers.runtime.build_probe_fleet`): its step-down and its
            ``prompt_cache_key`` drop are what this check reports on.
        model: The default judge model.
        metrics: The metrics to send one real prompt of.
        model_for: Each metric's judge model.
        timeout_s: Longest wait for the model list.

    Returns:
        The report; its ``problems`` say whether the judge will work.
    """
    report = CheckReport(endpoint=fleet.endpoint, model=model)
    listed = _models(fleet, report, wanted=sorted({model, *model_for.values()}),
                     timeout_s=timeout_s)
    if listed is None:  # unreachable or refused: nothing else can work
        return report
    _formats(fleet, report, model=model)
    for metric in metrics:
        report.probes.append(_metric(fleet, metric, model=model_for[metric.name]))
    return report


def check_endpoint(fleet: JudgeFleet, report: CheckReport, *, name: str,
                   wanted: Sequence[str], timeout_s: float = 60.0) -> None:
    """Probe a named endpoint a cascade tier is asked on (``EVALFLEET_JUDGE_ENDPOINTS``):
    reachable, authenticated, and listing the models its tiers ask for. Its probe and
    any problem name the endpoint, so the failing one of several is plain.

    Args:
        fleet: A fleet that has the endpoint among its named ones.
        report: The report to add the probe to.
        name: The endpoint's name.
        wanted: The models its tiers ask for.
        timeout_s: Longest wait for the model list.
    """
    _models(fleet, report, wanted=sorted(set(wanted)), where=name, timeout_s=timeout_s)


def _models(fleet: JudgeFleet, report: CheckReport, *, wanted: list[str],
            timeout_s: float, where: str | None = None) -> list[str] | None:
    what = "models" if where is None else f"models (endpoint {where})"
    url = fleet.endpoint if where is None else fleet.endpoints[where][0].provider.endpoint
    who = f"the judge at {url}" if where is None else f"endpoint {where} at {url}"
    started = time.perf_counter()
    try:
        listed = fleet.list_models(where, timeout_s=timeout_s)
    except JudgeError as exc:
        reason = ("refuses access" if isinstance(exc, JudgeRejected) and exc.is_access_problem
                  else "cannot be used")
        report.probes.append(Probe(what, False, str(exc), problem=f"{who} {reason}: {exc}"))
        return None
    latency_ms = _ms(started)
    if listed is None:
        report.probes.append(Probe(what, True, "the provider lists no models",
                                   latency_ms=latency_ms))
        return []
    missing = [name for name in wanted if name not in listed]
    shown = ", ".join(listed[:8]) + (" ..." if len(listed) > 8 else "")
    report.probes.append(Probe(
        what, not missing, f"listed: {shown or 'none'}", latency_ms=latency_ms,
        problem=(f"model(s) {', '.join(missing)} not listed by {who} (it lists: "
                 f"{shown or 'none'})") if missing else None))
    return listed


def _formats(fleet: JudgeFleet, report: CheckReport, *, model: str) -> None:
    """One tiny request in the configured mode: each mode the fleet's step-down lowered
    from is a probe (refused), the one it answered in another (accepted)."""
    asked = fleet.formats.mode_for(model)
    request = JudgeRequest(
        messages=[{"role": "user", "content": 'Reply with the JSON object {"score": 1}.'}],
        model=model, temperature=0.0, max_tokens=16, response_format=_FORMATS[asked])
    answer, latency_ms = _send(fleet, request)
    reached = fleet.formats.mode_for(model)
    for mode in MODES[MODES.index(asked):MODES.index(reached):-1]:
        report.probes.append(Probe(f"format {mode}", False,
                                   f"refused (stepped down): the fleet sends {reached}"))
    if isinstance(answer, JudgeReply):
        report.probes.append(Probe(f"format {reached}", True, "accepted", latency_ms=latency_ms,
                                   prompt_tokens=answer.prompt_tokens,
                                   completion_tokens=answer.completion_tokens,
                                   cached_tokens=answer.cached_tokens))
    else:
        report.probes.append(Probe(f"format {reached}", False, _line(answer),
                                   latency_ms=latency_ms,
                                   problem=f"format {reached}: {_line(answer)}"))


def _metric(fleet: JudgeFleet, metric: Metric, *, model: str) -> Probe:
    try:
        items, _ = load_gold(bundled_gold(metric.name), metric=metric)
    except FileNotFoundError:
        return Probe(f"metric {metric.name}", True, "no bundled sample to send: not probed")
    options = metric.spec.judge
    request = JudgeRequest(messages=render_messages(metric, items[0].sample), model=model,
                           temperature=options.temperature, max_tokens=options.max_tokens,
                           response_format=response_format_for(metric, supported="json_schema"),
                           metric=metric.name,
                           prompt_cache_key=prompt_cache_key(metric.name, metric.version))
    keyed = fleet.cache_keys.accepts(model)
    answer, latency_ms = _send(fleet, request)
    cache_key = ("; prompt_cache_key refused, not sent"
                 if keyed and not fleet.cache_keys.accepts(model) else "")
    what = f"metric {metric.name}"
    if isinstance(answer, JudgeError):
        reason = ("the prompt is longer than the judge's context" if prompt_too_long(answer)
                  else _line(answer))
        return Probe(what, False, reason, latency_ms=latency_ms,
                     problem=f"{metric.name} ({model}): {reason}")
    result = parse_verdict(answer.text, metric=metric, sample=items[0].sample,
                           finish_reason=answer.finish_reason)
    sent = mode_of(shaped(request.response_format, fleet.formats.mode_for(model)))
    ok = not isinstance(result, ParseFailure)
    reason = (f"verdict parsed ({sent}){cache_key}" if not isinstance(result, ParseFailure)
              else f"no usable verdict in {sent} ({result.error_class}: "
                   f"{_line(result.message)}){cache_key}")
    return Probe(what, ok, reason, problem=None if ok else f"{metric.name} ({model}): {reason}",
                 latency_ms=latency_ms, prompt_tokens=answer.prompt_tokens,
                 completion_tokens=answer.completion_tokens, cached_tokens=answer.cached_tokens)


def _send(fleet: JudgeFleet, request: JudgeRequest) -> tuple[JudgeReply | JudgeError, int]:
    started = time.perf_counter()
    (answer,) = fleet.complete_many([request])
    return answer, _ms(started)


def _ms(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)


def _line(error: object) -> str:
    """An error's text on one line, cut to 200 characters."""
    return " ".join(str(error).split())[:200]
