"""``evalfleet judge cascade status``: what a judge cascade guarantees, on how many labels."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from evalfleet.cli.alerts import render_table
from evalfleet.cli.boundary import SETUP_EXIT_CODE
from evalfleet.cli.context import CliState, pass_state


@click.group()
def cascade() -> None:
    """Judge cascades: a cheap judge first, the next only when it is not sure enough."""


@cascade.command("status")
@click.argument("labels", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--metric", required=True, help="The metric the items were judged on.")
@click.option("--target", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              default=0.85, show_default=True,
              help="Agreement with people the accepted verdicts must reach.")
@click.option("--delta", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              default=0.05, show_default=True,
              help="Chance per tier that they do not (all tiers: 1 - the sum).")
@click.option("--tolerance", type=click.FloatRange(0, 1, max_open=True), default=0.1,
              show_default=True, help="Continuous scores (0..1) this close agree.")
@click.option("--min-labels", type=click.IntRange(1), default=30, show_default=True,
              help="Fewest labels behind a threshold; fewer and the tier settles nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@pass_state
def status(state: CliState, labels: Path, metric: str, target: float, delta: float,
           tolerance: float, min_labels: int, as_json: bool) -> None:
    """Fit each tier's threshold on LABELS (JSONL: random review items with people's
    labels and every tier's verdict, confidence and cost; docs/judges.md#cascades) and show
    per tier: threshold, labels behind it, guaranteed agreement, share settled, and the
    cascade's judge cost per 1,000 verdicts against the last tier alone. Bad lines are
    named on stderr and left out."""
    from evalfleet.calibration.cascade import Guarantee
    from evalfleet.calibration.cascade_status import cascade_status, read_items
    from evalfleet.core.metric import load_registry
    from evalfleet.core.scales import score_kinds

    kinds = score_kinds(load_registry(state.settings.metrics_dir).get(metric))
    with labels.open(encoding="utf-8", errors="replace") as lines:
        items, problems = read_items(lines)
    for problem in problems:
        click.echo(f"skipped {problem}", err=True)
    if not items:
        click.echo("problem: no labelled items to fit on", err=True)
        sys.exit(SETUP_EXIT_CODE)
    report = cascade_status(items, kinds=kinds, guarantee=Guarantee(
        target=target, delta=delta, tolerance=tolerance, min_labels=min_labels))
    fit = report.fit
    if as_json:
        click.echo(json.dumps({
            "metric": metric, "items": fit.items, "target": target, "delta_per_tier": delta,
            "confidence_level": fit.confidence_level,
            "low_confidence_share": fit.low_confidence_share,
            "usd_per_1000": report.usd_per_1000,
            "last_tier_usd_per_1000": report.last_tier_usd_per_1000,
            "tiers": [{"tier": t.tier, "model": t.model, "threshold": t.threshold,
                       "labels": t.labels, "accepted": t.accepted,
                       "guaranteed_agreement": t.guaranteed_agreement,
                       "settled_share": t.settled_share} for t in report.tiers],
        }, indent=2))
        return
    click.echo(f"{metric}: {fit.items} labelled items; accepted verdicts agree with people "
               f">= {target:.0%} with probability >= {fit.confidence_level:.0%}")
    click.echo(render_table(
        ["tier", "model", "threshold", "labels", "guaranteed", "settled"],
        [[str(t.tier), t.model or "-", _num(t.threshold), str(t.labels),
          _share(t.guaranteed_agreement), _share(t.settled_share)] for t in report.tiers]))
    click.echo(f"low confidence (stored as the last tier's, outside the guarantee): "
               f"{fit.low_confidence_share:.1%}")
    click.echo(f"judge cost per 1,000 verdicts: {_usd(report.usd_per_1000)} "
               f"(last tier alone: {_usd(report.last_tier_usd_per_1000)})")


def _num(value: float | None) -> str:
    return "none (settles nothing)" if value is None else f"{value:.3f}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _usd(value: float | None) -> str:
    return "unknown" if value is None else f"${value:.4f}"
