"""``evalfleet judge check``: will the configured judge work, and how."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click

from evalfleet.cli.alerts import render_table
from evalfleet.cli.boundary import SETUP_EXIT_CODE
from evalfleet.cli.cascade import cascade
from evalfleet.cli.context import CliState, pass_state

if TYPE_CHECKING:
    from evalfleet.core.metric import Metric


@click.group()
def judge() -> None:
    """The judge the fleet calls (OPENAI_BASE_URL, EVALFLEET_JUDGE_MODEL)."""


@judge.command("check")
@click.option("--metric", "metric_names", multiple=True,
              help="Only this metric's real prompt (repeatable); default: every metric.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@pass_state
def check(state: CliState, metric_names: tuple[str, ...], as_json: bool) -> None:
    """Probe the judge through the fleet's layers: reachable and authenticated, the models
    listed, a tiny request stepped down to a response format the judge accepts, and one
    real prompt of each metric rendered, sent and parsed, with latency, tokens and cached
    tokens. Exit status 2, one line per problem,
    when the judge will not work as configured. Each probe is a real call (a paid API
    bills it)."""
    from evalfleet.core.metric import load_registry
    from workers.judge.check import CheckReport, Probe, check_endpoint, check_judge
    from workers.runtime import build_probe_fleet

    settings = state.settings
    registry = load_registry(settings.judge.metrics_dir)
    metrics = [registry.get(name) for name in metric_names] if metric_names else list(registry)
    model_for = {metric.name: settings.judge_model_for(
        metric.name, metric_default=metric.spec.judge.main_model) for metric in metrics}
    named = _tier_endpoints(metrics)
    fleet = build_probe_fleet(settings)
    try:
        report: CheckReport = check_judge(fleet, model=settings.judge.judge_model, metrics=metrics,
                                          model_for=model_for)
        for name, models in sorted(named.items()):
            if name not in fleet.endpoints:  # the worker refuses to start on it too
                report.probes.append(Probe(
                    f"models (endpoint {name})", False, "not defined",
                    problem=f"endpoint {name}, named by a cascade tier, is not defined in "
                            "EVALFLEET_JUDGE_ENDPOINTS"))
                continue
            check_endpoint(fleet, report, name=name, wanted=sorted(models))
    finally:
        fleet.close()
    if as_json:
        click.echo(json.dumps(report.as_json(), indent=2))
    else:
        click.echo(f"judge {report.endpoint}, model {report.model}")
        click.echo(render_table(
            ["probe", "ok", "latency ms", "prompt", "completion", "cached", "detail"],
            [[probe.what, "yes" if probe.ok else "no", _cell(probe.latency_ms),
              _cell(probe.prompt_tokens), _cell(probe.completion_tokens),
              _cell(probe.cached_tokens), probe.detail] for probe in report.probes]))
    for problem in report.problems:
        click.echo(f"problem: {problem}", err=True)
    if report.problems:
        sys.exit(SETUP_EXIT_CODE)


def _tier_endpoints(metrics: list[Metric]) -> dict[str, set[str]]:
    """The named endpoints the metrics' cascade tiers are asked on, with their models."""
    named: dict[str, set[str]] = {}
    for metric in metrics:
        for tier in metric.spec.judge.cascade:
            if tier.endpoint is not None and tier.model is not None:
                named.setdefault(tier.endpoint, set()).add(tier.model)
    return named


def _cell(value: int | None) -> str:
    return "-" if value is None else str(value)


judge.add_command(cascade)
