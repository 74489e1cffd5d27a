"""``evalfleet calibrate``: how well the judge agrees with people on a gold set."""

from __future__ import annotations

import json
from pathlib import Path

import click

from evalfleet.cli.context import CliState, pass_state


@click.command()
@click.argument("gold", required=False, type=click.Path(exists=True, dir_okay=False,
                                                        path_type=Path))
@click.option("--metric", required=True, help="The metric the gold labels are for.")
@click.option("--judge-model", default=None,
              help="Judge model to calibrate (default: the one the workers use).")
@click.option("--start-worker", is_flag=True,
              help="Run a worker for the metric's queue during the calibration (and the judge "
                   "simulator when no OPENAI_BASE_URL is set).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(1, 86400), default=600,
              show_default=True, help="Seconds to wait for the verdicts.")
@click.option("--json", "as_json", is_flag=True, help="Print the reports as JSON.")
@pass_state
def calibrate(state: CliState, gold: Path | None, metric: str, judge_model: str | None,
              start_worker: bool, timeout_s: float, as_json: bool) -> None:
    """Judge GOLD (JSONL samples with people's "labels") through the fleet and report the
    agreement per score: kappa, accuracy and confusion for binary scores, weighted kappa
    and Spearman for 1-5 rubrics, Spearman, MAE and bias for 0..1 scores, each with a
    bootstrap 95% interval. Without GOLD, the metric's shipped gold set is used. Reports
    are kept in the store; the verdicts are marked as calibration and kept out of alerts,
    dashboards and exports.
    """
    from evalfleet.calibration.gold import bundled_gold
    from evalfleet.calibration.report import format_report
    from evalfleet.calibration.run import CalibrationOptions, run_calibration

    if gold is None:
        try:
            gold = bundled_gold(metric)
        except FileNotFoundError as exc:
            raise click.UsageError(f"{exc}; give a GOLD file") from None
    options = CalibrationOptions(metric=metric, gold=gold, judge_model=judge_model,
                                 timeout_s=timeout_s, start_worker=start_worker)
    try:
        reports = run_calibration(state.settings, options, echo=lambda line: click.echo(
            line, err=True))
    except TimeoutError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps([report.as_json() for report in reports], indent=2))
        return
    for report in reports:
        click.echo(format_report(report))
