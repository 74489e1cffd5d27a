"""Schema and verdict export: ``evalfleet migrate`` and ``evalfleet export``."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

import click

from evalfleet.cli.context import CliState, open_existing_store, parse_time, pass_state
from evalfleet.cli.jsonout import echo_json
from evalfleet.core.message import PURPOSES


@click.command()
@pass_state
def migrate(state: CliState) -> None:
    """Create or upgrade the verdict store's schema (Alembic)."""
    from evalfleet.store import migrate as run_migrations
    from evalfleet.store import open_store, schema_revision
    from evalfleet.store.setup import describe_url

    url = state.settings.resolved_database_url()
    store = open_store(url)
    try:
        before = schema_revision(store.engine)
        run_migrations(store.engine)
        after = schema_revision(store.engine)
    finally:
        store.close()
    where = describe_url(url)
    if before is None:
        click.echo(f"created the schema (revision {after}) in {where}")
    elif before != after:
        click.echo(f"upgraded the schema from revision {before} to {after} in {where}")
    else:
        click.echo(f"schema is up to date (revision {after}) in {where}")


@click.command()
@click.option("--metric", default=None, help="Only this metric.")
@click.option("--since", default=None, help="Created at or after: ISO 8601 time or 15m/2h/7d ago.")
@click.option("--until", default=None, help="Created before: ISO 8601 time or 15m/2h/7d ago.")
@click.option("--with-sample", is_flag=True,
              help="Add each verdict's judged sample (input, output, context, reference, "
                   "fields) as 'sample'.")
@click.option("--purpose", "purposes", multiple=True, default=("production",),
              show_default=True, type=click.Choice(PURPOSES),
              help="Only verdicts made for this purpose (repeatable): the app's traffic, or "
                   "calibration, canary and shadow verdicts.")
@pass_state
def export(state: CliState, metric: str | None, since: str | None, until: str | None,
           with_sample: bool, purposes: tuple[str, ...]) -> None:
    """Write verdicts to stdout as JSONL, oldest first."""
    from evalfleet.store.queries.export import export_row

    try:
        since_at, until_at = parse_time(since), parse_time(until)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    store = open_existing_store(state.settings.resolved_read_database_url())
    out = sys.stdout
    try:
        for record in store.iter_verdicts(metric=metric, since=since_at, until=until_at,
                                          with_samples=with_sample, purposes=purposes):
            row = export_row(record, with_sample=with_sample)
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    finally:
        store.close()


@click.command()
@click.option("--days", type=click.IntRange(1, 366), default=7, show_default=True,
              help="How many UTC days back, today included.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
@pass_state
def cost(state: CliState, days: int, as_json: bool) -> None:
    """Judge spend per metric and UTC day: verdicts, tokens (the prompt tokens served from
    the provider's prompt cache apart), US dollars."""
    from datetime import UTC, datetime, timedelta


    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    store = open_existing_store(state.settings.resolved_database_url())
    try:
        rows = store.daily_costs(since=today - timedelta(days=days - 1))
    finally:
        store.close()
    budgets = state.settings.judge.daily_budgets_usd
    if as_json:
        echo_json([{**asdict(row), "budget_usd": budgets.get(row.metric)} for row in rows])
        return
    click.echo(f"{'day':<10}  {'metric':<20} {'verdicts':>9} {'prompt tok':>11} "
               f"{'cached':>7} {'compl. tok':>10} {'cost USD':>10} {'USD/verdict':>11} "
               f"{'budget':>8}")
    for row in rows:
        per_verdict = row.cost_usd / row.verdicts if row.verdicts else 0.0
        budget = budgets.get(row.metric)
        cached = f"{row.cached_tokens / row.prompt_tokens:.0%}" if row.prompt_tokens else "-"
        click.echo(f"{row.day.isoformat():<10}  {row.metric:<20} {row.verdicts:>9} "
                   f"{row.prompt_tokens:>11} {cached:>7} {row.completion_tokens:>10} "
                   f"{row.cost_usd:>10.4f} "
                   f"{per_verdict:>11.6f} {'-' if budget is None else f'{budget:.2f}':>8}")
