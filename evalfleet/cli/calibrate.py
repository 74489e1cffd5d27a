"""``evalfleet calibrate``: how well the judge agrees with people on a gold set."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import click

from evalfleet.cli.context import CliState, open_existing_store, pass_state
from evalfleet.core.durations import format_moment


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
@click.option("--compare", is_flag=True,
              help="Instead of a gold set: each shadow judge (EVALFLEET_SHADOW_JUDGES) against "
                   "the current judge on the samples both judged, and each against people "
                   "from its last calibration.")
@click.option("--since", default="7d", show_default=True,
              help="With --compare: verdicts created since (ISO 8601 time or 15m/2h/7d ago).")
@click.option("--json", "as_json", is_flag=True, help="Print the reports as JSON.")
@click.option("--dataset", "dataset_name", default=None, metavar="NAME",
              help="Instead of GOLD: the latest version of dataset NAME, its items of the "
                   "metric that people labelled (evalfleet dataset export --format gold).")
@pass_state
def calibrate(state: CliState, gold: Path | None, metric: str, judge_model: str | None,
              start_worker: bool, timeout_s: float, compare: bool, since: str,
              as_json: bool, dataset_name: str | None) -> None:
    """Judge GOLD (JSONL samples with people's "labels") through the fleet and report the
    agreement per score: kappa, accuracy and confusion for binary scores, weighted kappa
    and Spearman for 1-5 rubrics, Spearman, MAE and bias for 0..1 scores, each with a
    bootstrap 95% interval. Without GOLD, the metric's shipped gold set is used (with
    --dataset, a dataset's labelled items). Reports are kept in the store; the verdicts
    are marked as calibration and kept out of alerts, dashboards and exports.
    """
    from evalfleet.core.gold import bundled_gold

    if compare:
        _compare(state, metric=metric, since=since, as_json=as_json)
        return
    if dataset_name is not None:
        if gold is not None:
            raise click.UsageError("give GOLD or --dataset, not both")
        with tempfile.TemporaryDirectory() as folder:
            gold = Path(folder) / f"{dataset_name}.jsonl"
            _write_dataset_gold(state, dataset_name, metric=metric, path=gold)
            _calibrate(state, gold, metric=metric, judge_model=judge_model,
                       start_worker=start_worker, timeout_s=timeout_s, as_json=as_json)
        return
    if gold is None:
        try:
            gold = bundled_gold(metric)
        except FileNotFoundError as exc:
            raise click.UsageError(f"{exc}; give a GOLD file") from None
    _calibrate(state, gold, metric=metric, judge_model=judge_model, start_worker=start_worker,
               timeout_s=timeout_s, as_json=as_json)


def _calibrate(state: CliState, gold: Path, *, metric: str, judge_model: str | None,
               start_worker: bool, timeout_s: float, as_json: bool) -> None:
    from evalfleet.calibration.report import format_report
    from evalfleet.calibration.run import CalibrationOptions, run_calibration

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


def _write_dataset_gold(state: CliState, name: str, *, metric: str, path: Path) -> None:
    """Write the gold file of dataset ``name``'s latest version for ``metric`` to ``path``."""
    from evalfleet.cli.dataset import open_datasets, write_export

    with open_datasets(state) as sets:
        items = [item for item in sets.items(name) if item.metric == metric]
    with path.open("w", encoding="utf-8") as out:
        written = write_export(items, fmt="gold", metric=metric, state=state, out=out)
    if not written:
        raise click.UsageError(f"dataset {name!r} has no {metric} item that people labelled")
    click.echo(f"gold set: {written} labelled item(s) of dataset {name}", err=True)


def _compare(state: CliState, *, metric: str, since: str, as_json: bool) -> None:
    from evalfleet.calibration.report import format_report
    from evalfleet.calibration.run import compare_shadows
    from evalfleet.cli.context import parse_time
    from evalfleet.core.metric import load_registry

    try:
        since_at = parse_time(since)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    assert since_at is not None
    spec = load_registry(state.settings.judge.metrics_dir).get(metric)
    store = open_existing_store(state.settings.resolved_database_url())
    try:
        reports = compare_shadows(store, metric=spec, since=since_at)
        people = {(run.judge_model, run.prompt_version): run
                  for run in reversed(store.calibration_runs(metric=metric))}
    finally:
        store.close()
    if not reports:
        raise click.ClickException(
            f"no shadow verdicts for {metric} since {since}: set EVALFLEET_SHADOW_JUDGES, "
            "e.g. {\"%s\": {\"model\": \"gpt-4.1\", \"share\": 0.1}}" % metric)
    if as_json:
        click.echo(json.dumps({"shadows": [report.as_json() for report in reports],
                               "calibrations": [run.report for run in people.values()]},
                              indent=2))
        return
    for report in reports:
        click.echo(format_report(report))
    for (model, version), run in people.items():
        click.echo(f"against people ({run.gold}, {format_moment(run.created_at)}): judge "
                   f"{model}, prompt {version}: " + _summary(run.report))


def _summary(report: dict[str, object]) -> str:
    scores = report.get("scores")
    parts = []
    for name, result in (scores.items() if isinstance(scores, dict) else []):
        statistics = result.get("statistics", {}) if isinstance(result, dict) else {}
        for statistic, estimate in list(statistics.items())[:1]:
            value = estimate.get("value") if isinstance(estimate, dict) else None
            shown = "-" if value is None else f"{value:.3f}"
            parts.append(f"{name} {statistic} {shown}")
    return ", ".join(parts) or "no scores"
