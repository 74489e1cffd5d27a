"""``evalfleet dead-letters list|replay|purge``: jobs that could not become verdicts."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from evalfleet.cli.alerts import render_table
from evalfleet.cli.context import CliState, open_existing_store, parse_time, pass_state

if TYPE_CHECKING:
    from evalfleet.ops.dead_letter import DeadLetterFilter, ReplayReport

#: Characters of the error shown in the table (``--json`` has it whole).
ERROR_COLUMN_CHARS = 60


def _filter_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The selection options every subcommand takes."""
    for option in reversed([
        click.option("--metric", default=None, help="Only this metric."),
        click.option("--error-class", default=None,
                     help="Only this error class (judge_unavailable, judge_rejected, ...)."),
        click.option("--since", default=None,
                     help="Created at or after: ISO 8601 time or 15m/2h/7d ago."),
        click.option("--until", default=None,
                     help="Created before: ISO 8601 time or 15m/2h/7d ago."),
        click.option("--limit", type=click.IntRange(min=1), default=None,
                     help="At most this many, oldest first."),
    ]):
        command = option(command)
    return command


def _selection(metric: str | None, error_class: str | None, since: str | None,
               until: str | None, limit: int | None) -> DeadLetterFilter:
    from evalfleet.ops.dead_letter import DeadLetterFilter

    try:
        return DeadLetterFilter(metric=metric, error_class=error_class, since=parse_time(since),
                                until=parse_time(until), limit=limit)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


@click.group("dead-letters")
def dead_letters() -> None:
    """Jobs that exhausted their retries or could not be processed, with their payloads."""


@dead_letters.command("list")
@_filter_options
@click.option("--json", "as_json", is_flag=True,
              help="JSONL: one object per dead letter, with its history and payload.")
@pass_state
def dead_letters_list(state: CliState, metric: str | None, error_class: str | None,
                      since: str | None, until: str | None, limit: int | None,
                      as_json: bool) -> None:
    """List dead letters, oldest first."""
    from evalfleet.ops.dead_letter import dead_letter_json, iter_dead_letters

    selection = _selection(metric, error_class, since, until, limit)
    store = open_existing_store(state.settings.resolved_database_url(), pool_size=1)
    try:
        found = iter_dead_letters(store, selection)
        if as_json:
            for stored in found:
                click.echo(json.dumps(dead_letter_json(stored), ensure_ascii=False))
            return
        rows = [[str(s.id), _iso(s.letter.created_at),
                 s.letter.metric or "-", s.letter.error_class, str(s.letter.attempts),
                 s.letter.sample_id or "-", _short(s.letter.error)] for s in found]
    finally:
        store.close()
    click.echo(render_table(["id", "created", "metric", "error class", "attempts",
                             "sample", "error"], rows))
    click.echo(f"{len(rows)} dead letter{'s' if len(rows) != 1 else ''}")


@dead_letters.command("replay")
@_filter_options
@click.option("--dry-run", is_flag=True, help="Show what would be replayed; change nothing.")
@pass_state
def dead_letters_replay(state: CliState, metric: str | None, error_class: str | None,
                        since: str | None, until: str | None, limit: int | None,
                        dry_run: bool) -> None:
    """Publish the jobs of dead letters again (attempt 1, history kept) and delete them.

    Each batch is published and deleted in one transaction, so a letter is never
    replayed twice, even by two replays at once. Letters whose payload is not a job
    stay in place. Exits with 1 when the broker could not be reached.
    """
    from evalfleet.ops.dead_letter import replay_dead_letters
    from producers.enqueuer import Enqueuer

    selection = _selection(metric, error_class, since, until, limit)
    store = open_existing_store(state.settings.resolved_database_url(), pool_size=1)
    enqueuer = Enqueuer(state.settings)
    try:
        report = replay_dead_letters(store, selection, publish=enqueuer.send_many,
                                     dry_run=dry_run)
    finally:
        enqueuer.close()
        store.close()
    _print_replay(report, dry_run=dry_run)
    if report.error:
        raise click.ClickException(f"replay stopped: {report.error}")


def _print_replay(report: ReplayReport, *, dry_run: bool) -> None:
    verb = "would replay" if dry_run else "replayed"
    jobs = ", ".join(f"{count} to eval.{metric}" for metric, count in sorted(report.jobs.items()))
    click.echo(f"{verb} {report.letters} dead letter{'s' if report.letters != 1 else ''}"
               + (f": {jobs}" if jobs else ""))
    if report.skipped:
        click.echo(f"left {len(report.skipped)} that are not job messages:")
        for letter_id, why in report.skipped:
            click.echo(f"  id {letter_id}: {why}")


@dead_letters.command("purge")
@_filter_options
@click.option("--dry-run", is_flag=True, help="Count what would be deleted; delete nothing.")
@click.option("--yes", is_flag=True, help="Needed to delete every dead letter (no filter).")
@pass_state
def dead_letters_purge(state: CliState, metric: str | None, error_class: str | None,
                       since: str | None, until: str | None, limit: int | None,
                       dry_run: bool, yes: bool) -> None:
    """Delete dead letters for good, in batches."""
    from evalfleet.ops.dead_letter import purge_dead_letters

    selection = _selection(metric, error_class, since, until, limit)
    if selection.selects_all and not yes and not dry_run:
        raise click.UsageError("no filter given: add --yes to delete every dead letter")
    store = open_existing_store(state.settings.resolved_database_url(), pool_size=1)
    try:
        count = purge_dead_letters(store, selection, dry_run=dry_run)
    finally:
        store.close()
    click.echo(f"{'would delete' if dry_run else 'deleted'} {count} dead "
               f"letter{'s' if count != 1 else ''}")


def _short(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= ERROR_COLUMN_CHARS else line[:ERROR_COLUMN_CHARS - 3] + "..."


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")
