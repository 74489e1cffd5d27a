"""``evalfleet purge``: apply the retention settings to the verdict store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import click

from evalfleet.cli.alerts import render_table
from evalfleet.cli.context import CliState, open_existing_store, pass_state

if TYPE_CHECKING:
    from evalfleet.store import SqlStore


@click.command()
@click.option("--dry-run", is_flag=True, help="Count what would be purged; change nothing.")
@click.option("--batch-rows", type=click.IntRange(100, 1_000_000), default=10_000,
              show_default=True, help="Verdicts per transaction.")
@pass_state
def purge(state: CliState, dry_run: bool, batch_rows: int) -> None:
    """Delete verdicts older than EVALFLEET_VERDICT_RETENTION_DAYS (scores with them),
    empty the raw judge output and error text of those older than
    EVALFLEET_RAW_OUTPUT_RETENTION_DAYS, and delete the kept samples of those older than
    EVALFLEET_SAMPLE_RETENTION_DAYS, in small transactions (safe to run while the
    fleet works, and to interrupt: the next run carries on). Datasets keep copies of
    their samples: they go only by their own retention (EVALFLEET_DATASET_RETENTION_DAYS,
    or the one a dataset was given).
    """
    from evalfleet.ops.purger import Purger
    from evalfleet.ops.retention import RetentionPolicy

    policy = RetentionPolicy.from_settings(state.settings)
    sample_days = state.settings.retention.sample_retention_days
    _purge_datasets(state, dry_run=dry_run)
    if policy.keeps_everything and sample_days is None:
        click.echo("no retention set (EVALFLEET_VERDICT_RETENTION_DAYS, "
                   "EVALFLEET_RAW_OUTPUT_RETENTION_DAYS, EVALFLEET_SAMPLE_RETENTION_DAYS): "
                   "nothing to purge")
        return
    now = datetime.now(UTC)
    store = open_existing_store(state.settings.resolved_database_url(), pool_size=1)
    try:
        report = Purger(store, policy, batch_rows=batch_rows).run(now=now, dry_run=dry_run)
        if sample_days is not None:
            _purge_samples(store, before=now - timedelta(days=sample_days),
                           batch_rows=batch_rows, dry_run=dry_run)
            _purge_review_samples(store, before=now - timedelta(days=sample_days), now=now,
                                  dry_run=dry_run)
    finally:
        store.close()
    cutoffs = report.cutoffs
    verdicts_label = "verdicts to delete" if dry_run else "verdicts deleted"
    raw_label = "raw outputs to empty" if dry_run else "raw outputs emptied"
    for label, moment in ((verdicts_label, cutoffs.verdicts_before),
                          (raw_label, cutoffs.raw_output_before)):
        when = "kept (no retention)" if moment is None else \
            f"created before {moment.isoformat(timespec='seconds').replace('+00:00', 'Z')}"
        click.echo(f"{label}: {when}")
    metrics = sorted(set(report.verdicts_deleted) | set(report.raw_outputs_emptied))
    rows = [[metric, f"{report.verdicts_deleted.get(metric, 0):,}",
             f"{report.raw_outputs_emptied.get(metric, 0):,}"] for metric in metrics]
    rows.append(["total", f"{sum(report.verdicts_deleted.values()):,}",
                 f"{sum(report.raw_outputs_emptied.values()):,}"])
    click.echo(render_table(["metric", verdicts_label, raw_label], rows))
    if report.partitions_dropped:
        click.echo(("days to drop whole: " if dry_run else "days dropped whole: ")
                   + ", ".join(report.partitions_dropped))
    if report.pending_finals_forgotten:
        click.echo(("final marks to forget" if dry_run else "final marks forgotten")
                   + f" (their verdicts never came): {report.pending_finals_forgotten:,}")
    if dry_run:
        click.echo(f"dry run: nothing changed ({report.elapsed_s:.1f} s)")
    else:
        click.echo(f"{report.transactions} transactions, {report.elapsed_s:.1f} s")


def _purge_review_samples(store: SqlStore, *, before: datetime, now: datetime,
                          dry_run: bool) -> None:
    """The review queue's copies of samples: kept while an item waits for labels."""
    from evalfleet.store.queries.review_queue import ReviewQueue

    count = ReviewQueue(store).purge_samples(before=before, now=now, dry_run=dry_run)
    label = "review samples to delete" if dry_run else "review samples deleted"
    click.echo(f"{label}: {count:,} (of items labelled or expired; waiting items keep theirs)")


def _purge_samples(store: SqlStore, *, before: datetime, batch_rows: int,
                   dry_run: bool) -> None:
    """Apply EVALFLEET_SAMPLE_RETENTION_DAYS: the verdicts stay, their samples go."""
    from evalfleet.store.queries.retention import VerdictRetention

    count, transactions = VerdictRetention(store, batch_rows=batch_rows).purge_samples(
        before=before, dry_run=dry_run)
    label = "samples to delete" if dry_run else "samples deleted"
    when = before.isoformat(timespec="seconds").replace("+00:00", "Z")
    click.echo(f"{label}: {count:,} of verdicts created before {when}"
               + ("" if dry_run else f" ({transactions} transactions)"))


def _purge_datasets(state: CliState, *, dry_run: bool) -> None:
    """Delete the datasets past their retention (their own, else the setting's)."""
    from evalfleet.store.queries.datasets import Datasets

    store = open_existing_store(state.settings.resolved_database_url(), pool_size=1)
    try:
        names = Datasets(store).purge(now=datetime.now(UTC), dry_run=dry_run,
                                      default_days=state.settings.retention.dataset_retention_days)
    finally:
        store.close()
    if names:
        label = "datasets to delete" if dry_run else "datasets deleted"
        click.echo(f"{label}: {', '.join(names)}")
