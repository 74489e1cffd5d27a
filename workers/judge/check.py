"""``evalfleet judge check``: probe the configured judge the way the fleet will use it.

Through the provider contract, in order: the model list (reachable, authenticated, the
model served); each response-format mode with a tiny request (which the endpoint and
model accept); then one real prompt of each metric (the first sample of its bundled gold
set), rendered, sent in the strongest accepted mode with its ``prompt_cache_key`` (sent
again without it when the endpoint refuses it, as the fleet does), and parsed as a worker
would, with its latency, token usage and cached tokens. Every probe that shows the judge
will not work is a problem, in one line.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from evalfleet.core.errors import JudgeError, JudgeRejected
from evalfleet.core.gold import bundled_gold, load_gold
from evalfleet.core.metric import Metric
from workers.judge.base import JudgeReply, JudgeRequest, prompt_cache_key
from workers.judge.formats import mode_of
from workers.judge.provider import JudgeProvider
from workers.judge.status import (
    prompt_too_long,
    refuses_prompt_cache_key,
    refuses_response_format,
)
from workers.renderer import render_messages
from workers.verdicts import ParseFailure, parse_verdict, response_format_for
from workers.verdicts.schema import MODES, ResponseFormat

#: The tiny verdict each response-format probe asks for.
_TINY_SCHEMA = {"type": "object", "properties": {"score": {"type": "number"}},
                "required": ["score"], "additionalProperties": False}

#: The response-format arguments probed, strongest first (text: none).
_FORMAT_PROBES: dict[ResponseFormat, dict[str, Any] | None] = {
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


async def check_judge(provider: JudgeProvider, *, model: str, metrics: Sequence[Metric],
                      model_for: dict[str, str]) -> CheckReport:
    """Probe ``provider`` for ``model`` and each metric's judge model.

    Args:
        provider: The configured judge provider.
        model: The default judge model.
        metrics: The metrics to send one real prompt of.
        model_for: Each metric's judge model.

    Returns:
        The report; its ``problems`` say whether the judge will work.
    """
    report = CheckReport(endpoint=provider.endpoint, model=model)
    listed = await _models(provider, report, wanted=sorted({model, *model_for.values()}))
    if listed is None:  # unreachable or refused: nothing else can work
        return report
    accepted = await _formats(provider, report, model=model)
    for metric in metrics:
        report.probes.append(await _metric(provider, metric, model=model_for[metric.name],
                                           mode=accepted))
    return report


async def check_endpoint(provider: JudgeProvider, report: CheckReport, *, name: str,
                         wanted: Sequence[str]) -> None:
    """Probe a named endpoint a cascade tier is asked on (``EVALFLEET_JUDGE_ENDPOINTS``):
    reachable, authenticated, and listing the models its tiers ask for. Its probe and
    any problem name the endpoint, so the failing one of several is plain.

    Args:
        provider: A provider for that endpoint.
        report: The report to add the probe to.
        name: The endpoint's name.
        wanted: The models its tiers ask for.
    """
    await _models(provider, report, wanted=sorted(set(wanted)), where=f"endpoint {name}")


async def _models(provider: JudgeProvider, report: CheckReport, *,
                  wanted: list[str], where: str | None = None) -> list[str] | None:
    what = "models" if where is None else f"models ({where})"
    who = f"the judge at {provider.endpoint}" if where is None else \
        f"{where} at {provider.endpoint}"
    started = time.perf_counter()
    try:
        listed = await provider.list_models()
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


async def _formats(provider: JudgeProvider, report: CheckReport, *,
                   model: str) -> ResponseFormat:
    """Probe each mode; returns the strongest accepted (``text`` when none is)."""
    accepted: list[ResponseFormat] = []
    for mode, response_format in _FORMAT_PROBES.items():
        request = JudgeRequest(
            messages=[{"role": "user", "content": 'Reply with the JSON object {"score": 1}.'}],
            model=model, temperature=0.0, max_tokens=16, response_format=response_format)
        answer, latency_ms = await _send(provider, request)
        if isinstance(answer, JudgeReply):
            accepted.append(mode)
            report.probes.append(Probe(f"format {mode}", True, "accepted", latency_ms=latency_ms,
                                       prompt_tokens=answer.prompt_tokens,
                                       completion_tokens=answer.completion_tokens,
                                       cached_tokens=answer.cached_tokens))
        elif refuses_response_format(answer):
            report.probes.append(Probe(f"format {mode}", False,
                                       f"refused (stepped down): {_line(answer)}",
                                       latency_ms=latency_ms))
        else:
            report.probes.append(Probe(f"format {mode}", False, _line(answer),
                                       latency_ms=latency_ms,
                                       problem=f"format {mode}: {_line(answer)}"))
    return max(accepted, key=MODES.index, default="text")


async def _metric(provider: JudgeProvider, metric: Metric, *, model: str,
                  mode: ResponseFormat) -> Probe:
    try:
        items, _ = load_gold(bundled_gold(metric.name), metric=metric)
    except FileNotFoundError:
        return Probe(f"metric {metric.name}", True, "no bundled sample to send: not probed")
    options = metric.spec.judge
    request = JudgeRequest(messages=render_messages(metric, items[0].sample), model=model,
                           temperature=options.temperature, max_tokens=options.max_tokens,
                           response_format=response_format_for(metric, supported=mode),
                           metric=metric.name,
                           prompt_cache_key=prompt_cache_key(metric.name, metric.version))
    answer, latency_ms = await _send(provider, request)
    cache_key = ""
    if refuses_prompt_cache_key(answer):
        cache_key = "; prompt_cache_key refused, not sent"
        answer, latency_ms = await _send(provider, replace(request, prompt_cache_key=None))
    what = f"metric {metric.name}"
    if isinstance(answer, JudgeError):
        reason = ("the prompt is longer than the judge's context" if prompt_too_long(answer)
                  else _line(answer))
        return Probe(what, False, reason, latency_ms=latency_ms,
                     problem=f"{metric.name} ({model}): {reason}")
    result = parse_verdict(answer.text, metric=metric, sample=items[0].sample,
                           finish_reason=answer.finish_reason)
    sent = mode_of(request.response_format)
    ok = not isinstance(result, ParseFailure)
    reason = (f"verdict parsed ({sent}){cache_key}" if not isinstance(result, ParseFailure)
              else f"no usable verdict in {sent} ({result.error_class}: "
                   f"{_line(result.message)}){cache_key}")
    return Probe(what, ok, reason, problem=None if ok else f"{metric.name} ({model}): {reason}",
                 latency_ms=latency_ms, prompt_tokens=answer.prompt_tokens,
                 completion_tokens=answer.completion_tokens, cached_tokens=answer.cached_tokens)


async def _send(provider: JudgeProvider,
                request: JudgeRequest) -> tuple[JudgeReply | JudgeError, int]:
    started = time.perf_counter()
    try:
        answer: JudgeReply | JudgeError = await provider.generate(request)
    except JudgeError as exc:
        answer = exc
    return answer, _ms(started)


def _ms(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)


def _line(error: object) -> str:
    """An error's text on one line, cut to 200 characters."""
    return " ".join(str(error).split())[:200]
