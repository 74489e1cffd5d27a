"""``evalfleet judge cascade``: what a judge cascade guarantees, on how many labels, and
fitting its thresholds on the review queue's labels."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from evalfleet.cli.alerts import render_table
from evalfleet.cli.boundary import SETUP_EXIT_CODE
from evalfleet.cli.context import CliState, pass_state

if TYPE_CHECKING:
    from evalfleet.calibration.cascade import Guarantee
    from evalfleet.calibration.cascade_status import CascadeStatus, CostedItem
    from evalfleet.core.metric import Metric
    from evalfleet.store.queries.cascade import StoredThresholds


@click.group()
def cascade() -> None:
    """Judge cascades: a cheap judge first, the next only when it is not sure enough."""


def _guarantee_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options every cascade command shares: the metric and the guarantee."""
    for option in reversed([
        click.option("--metric", required=True, help="The metric judged by the cascade."),
        click.option("--target", type=click.FloatRange(0, 1, min_open=True, max_open=True),
                     default=0.85, show_default=True,
                     help="Agreement with people the accepted verdicts must reach."),
        click.option("--delta", type=click.FloatRange(0, 1, min_open=True, max_open=True),
                     default=0.05, show_default=True,
                     help="Chance per tier that they do not (all tiers: 1 - the sum)."),
        click.option("--tolerance", type=click.FloatRange(0, 1, max_open=True), default=0.1,
                     show_default=True, help="Continuous scores (0..1) this close agree."),
        click.option("--min-labels", type=click.IntRange(1), default=30, show_default=True,
                     help="Fewest labels behind a threshold; fewer and the tier settles "
                          "nothing."),
        click.option("--json", "as_json", is_flag=True, help="Print the status as JSON."),
    ]):
        command = option(command)
    return command


@cascade.command("status")
@click.argument("labels", required=False,
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
@_guarantee_options
@pass_state
def status(state: CliState, labels: Path | None, metric: str, target: float, delta: float,
           tolerance: float, min_labels: int, as_json: bool) -> None:
    """Fit each tier's threshold on LABELS (JSONL: random review items with people's
    labels and every tier's verdict, confidence and cost; docs/judges.md#cascades), or
    without LABELS on the review queue's labelled items of the metric's cascade, and show
    per tier: threshold, labels behind it, guaranteed agreement, share settled, and the
    cascade's judge cost per 1,000 verdicts against the last tier alone. Nothing is
    stored (``fit`` stores the thresholds). Bad lines are named on stderr and left out."""
    from evalfleet.calibration.cascade_status import read_items

    spec = _metric(state, metric)
    guarantee = _guarantee(target, delta, tolerance, min_labels)
    if labels is None:
        items, in_use = _queue_items(state, spec)
    else:
        with labels.open(encoding="utf-8", errors="replace") as lines:
            items, problems = read_items(lines)
        for problem in problems:
            click.echo(f"skipped {problem}", err=True)
        in_use = None
    if not items:
        click.echo("problem: no labelled items to fit on", err=True)
        sys.exit(SETUP_EXIT_CODE)
    _show(_fit(items, spec, guarantee), metric=spec, guarantee=guarantee,
          as_json=as_json, in_use=in_use)


@cascade.command("fit")
@_guarantee_options
@click.option("--dry-run", is_flag=True, help="Show the fit; store nothing.")
@click.option("--folds", type=click.IntRange(1, 20), default=1, show_default=True,
              help="Cross-fit: K folds by a hash of the sample id, each fold's thresholds "
                   "fitted on the other folds at delta / K (docs/estimates.md).")
@pass_state
def fit(state: CliState, metric: str, target: float, delta: float, tolerance: float,
        min_labels: int, as_json: bool, dry_run: bool, folds: int) -> None:
    """Fit the metric's cascade thresholds on the review queue's labelled random items
    and store them as the next version, which workers use within a minute. Refused,
    nothing stored, with fewer labelled items than --min-labels (until then every job
    goes to the last tier). Verdicts already stored are never judged again. With
    --folds K, workers judge each sample with its fold's thresholds, fitted without
    that fold's labels, so every label can correct the estimates across refits."""
    from evalfleet.core.cascade import metric_cascade_identity
    from evalfleet.store import open_store
    from evalfleet.store.queries.cascade import ThresholdBook

    spec = _metric(state, metric)
    guarantee = _guarantee(target, delta, tolerance, min_labels)
    items, _ = _queue_items(state, spec)
    if len(items) < min_labels:
        click.echo(f"problem: {len(items)} labelled random items of this cascade, at least "
                   f"{min_labels} needed: nothing stored, every job still goes to the last "
                   "tier", err=True)
        sys.exit(SETUP_EXIT_CODE)
    report = _fit(items, spec, guarantee)
    stored_report = _report_json(report, metric=spec, guarantee=guarantee)
    if folds > 1:
        stored_report["folds"] = _crossfit(items, spec, guarantee, folds=folds)
    stored = None
    if not dry_run:
        store = open_store(state.settings.resolved_database_url(), pool_size=1)
        try:
            stored = ThresholdBook(store).save(
                metric=metric, identity=metric_cascade_identity(spec),
                thresholds=report.fit.thresholds, report=stored_report,
                now=datetime.now(UTC))
        finally:
            store.close()
    _show(report, metric=spec, guarantee=guarantee, as_json=as_json, in_use=stored)
    if stored is not None and not as_json:
        click.echo(f"stored as version {stored.version} of {stored.identity}")


def _metric(state: CliState, name: str) -> Metric:
    from evalfleet.core.metric import load_registry

    return load_registry(state.settings.judge.metrics_dir).get(name)


def _guarantee(target: float, delta: float, tolerance: float, min_labels: int) -> Guarantee:
    from evalfleet.calibration.cascade import Guarantee

    return Guarantee(target=target, delta=delta, tolerance=tolerance, min_labels=min_labels)


def _queue_items(state: CliState, spec: Metric,
                 ) -> tuple[list[CostedItem], StoredThresholds | None]:
    """The review queue's usable items of the metric's cascade, and the fit in use."""
    from evalfleet.calibration.cascade_labels import queue_items
    from evalfleet.core.cascade import metric_cascade_identity
    from evalfleet.store import open_store
    from evalfleet.store.queries.cascade import ThresholdBook

    if not spec.spec.judge.cascade:
        click.echo(f"problem: metric {spec.name} has no judge.cascade", err=True)
        sys.exit(SETUP_EXIT_CODE)
    identity = metric_cascade_identity(spec)
    store = open_store(state.settings.resolved_read_database_url(), pool_size=1)
    try:
        book = ThresholdBook(store)
        rows = book.labelled_items(metric=spec.name, identity=identity)
        in_use = book.latest(metric=spec.name, identity=identity)
    finally:
        store.close()
    found = queue_items(rows, metric=spec)
    if found.not_every_tier or found.unlabelled or found.thinned:
        click.echo(f"left out: {found.not_every_tier} item(s) not judged by every tier, "
                   f"{found.unlabelled} with no usable label, {found.thinned} of "
                   "over-sampled strata (the fit needs an equal-probability draw)", err=True)
    return found.items, in_use


def _fit(items: list[CostedItem], spec: Metric, guarantee: Guarantee) -> CascadeStatus:
    from evalfleet.calibration.cascade_status import cascade_status
    from evalfleet.core.cascade import check_tiers
    from evalfleet.core.scales import score_kinds

    return cascade_status(items, kinds=score_kinds(spec), guarantee=guarantee,
                          fixed=check_tiers(spec))


def _crossfit(items: list[CostedItem], spec: Metric, guarantee: Guarantee, *,
              folds: int) -> list[list[float | None]]:
    """Each fold's thresholds, fitted on the other folds' items."""
    from evalfleet.calibration.crossfit import crossfit_cascade
    from evalfleet.core.cascade import check_tiers
    from evalfleet.core.scales import score_kinds

    fitted = crossfit_cascade([costed.item for costed in items], metric=spec.name, folds=folds,
                              kinds=score_kinds(spec), guarantee=guarantee,
                              fixed=check_tiers(spec))
    return [list(thresholds) for thresholds in fitted.thresholds]


def _report_json(report: CascadeStatus, *, metric: Metric,
                 guarantee: Guarantee) -> dict[str, Any]:
    fitted = report.fit
    checks = _check_tiers(metric)
    return {
        "metric": metric.name, "items": fitted.items, "target": guarantee.target,
        "delta_per_tier": guarantee.delta, "tolerance": guarantee.tolerance,
        "min_labels": guarantee.min_labels, "confidence_level": fitted.confidence_level,
        "low_confidence_share": fitted.low_confidence_share,
        "usd_per_1000": report.usd_per_1000,
        "last_tier_usd_per_1000": report.last_tier_usd_per_1000,
        "tiers": [{"tier": t.tier, "model": t.model, "threshold": t.threshold,
                   "check": t.tier in checks, "labels": t.labels, "accepted": t.accepted,
                   "guaranteed_agreement": t.guaranteed_agreement,
                   "settled_share": t.settled_share} for t in report.tiers],
    }


def _show(report: CascadeStatus, *, metric: Metric, guarantee: Guarantee, as_json: bool,
          in_use: StoredThresholds | None) -> None:
    fitted = report.fit
    if as_json:
        data = _report_json(report, metric=metric, guarantee=guarantee)
        data["thresholds_version"] = in_use.version if in_use else None
        click.echo(json.dumps(data, indent=2))
        return
    checks = _check_tiers(metric)
    click.echo(f"{metric.name}: {fitted.items} labelled items; accepted verdicts agree with "
               f"people >= {guarantee.target:.0%} with probability >= "
               f"{fitted.confidence_level:.0%}")
    click.echo(render_table(
        ["tier", "model", "threshold", "labels", "guaranteed", "settled"],
        [[str(t.tier), t.model or "-", _num(t.threshold, check=t.tier in checks),
          str(t.labels), _share(t.guaranteed_agreement), _share(t.settled_share)]
         for t in report.tiers]))
    click.echo(f"low confidence (stored as the last tier's, outside the guarantee): "
               f"{fitted.low_confidence_share:.1%}")
    click.echo(f"judge cost per 1,000 verdicts: {_usd(report.usd_per_1000)} "
               f"(last tier alone: {_usd(report.last_tier_usd_per_1000)})")
    if in_use is not None:
        thresholds = ", ".join(_num(value, check=tier in checks)
                               for tier, value in enumerate(in_use.thresholds, 1))
        folds = in_use.folds
        if folds:  # what workers use: each sample its fold's thresholds
            thresholds = "; ".join(f"fold {k}: " + ", ".join(
                _num(v, check=tier in checks) for tier, v in enumerate(fold, 1))
                for k, fold in enumerate(folds))
        click.echo(f"workers use version {in_use.version} (fitted "
                   f"{in_use.created_at:%Y-%m-%d %H:%M} UTC): {thresholds}")


def _check_tiers(metric: Metric) -> set[int]:
    """The numbers (1 = cheapest) of the cascade's check tiers."""
    from evalfleet.core.cascade import check_tiers

    return {index + 1 for index in check_tiers(metric)}


def _num(value: float | None, *, check: bool = False) -> str:
    if check:  # fixed, not fitted: its decisive results always settle
        return "check (settles what it is decisive on)"
    return "none (settles nothing)" if value is None else f"{value:.3f}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _usd(value: float | None) -> str:
    return "unknown" if value is None else f"${value:.4f}"
