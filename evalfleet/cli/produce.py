"""``evalfleet produce``: validate, sample and enqueue samples from JSONL."""

from __future__ import annotations

import sys
import time

import click

from evalfleet.cli.context import CliState, pass_state
from evalfleet.errors import EvalfleetError

#: Seconds between progress lines on a terminal.
PROGRESS_INTERVAL_S = 0.5

@click.command()
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--metric", "metric_names", multiple=True, required=True,
              help="Metric to enqueue for (repeatable).")
@click.option("--sample-rate", type=click.FloatRange(0.0, 1.0), default=None,
              help="Share of samples to keep, by id hash (default: EVALFLEET_SAMPLE_RATE).")
@pass_state
def produce(state: CliState, file: str, metric_names: tuple[str, ...],
            sample_rate: float | None) -> None:
    """Validate, sample and enqueue samples from a JSONL FILE (- for stdin).

    Bad lines are reported on stderr with their line number and field; the rest
    are enqueued. Exits 1 when any line was rejected, 2 on usage errors.
    """
    from evalfleet.metric import load_registry
    from producers.enqueuer import Enqueuer
    from producers.pipeline import ProduceStats
    from producers.pipeline import produce as run_produce
    from producers.source import read_lines

    registry = load_registry(state.settings.metrics_dir)
    try:
        metrics = [registry.get(name) for name in dict.fromkeys(metric_names)]
    except EvalfleetError as exc:
        raise click.UsageError(str(exc)) from None
    rate = state.settings.sample_rate if sample_rate is None else sample_rate
    show_progress = file != "-" and sys.stderr.isatty()
    last_shown = [0.0]

    def progress(stats: ProduceStats) -> None:
        now = time.monotonic()
        if show_progress and now - last_shown[0] >= PROGRESS_INTERVAL_S:
            last_shown[0] = now
            click.echo(f"\r{stats.lines} lines, {stats.jobs} jobs enqueued, "
                       f"{stats.rejected} rejected", nl=False, err=True)

    def report(error: EvalfleetError) -> None:
        click.echo(f"{file}: {error}", err=True)

    enqueuer = Enqueuer(state.settings)
    try:
        stats = run_produce(read_lines(file), metrics=metrics, rate=rate, send=enqueuer.send,
                            on_error=report, on_progress=progress)
    except OSError as exc:
        raise click.FileError(file, str(exc)) from None
    finally:
        enqueuer.close()
    if show_progress:
        click.echo("", err=True)
    per_metric = ", ".join(f"{name} {count}" for name, count in stats.enqueued.items()) or "none"
    click.echo(f"{file}: {stats.lines} lines, {stats.accepted} valid, {stats.sampled_out} "
               f"sampled out, {stats.rejected} rejected; jobs enqueued: {per_metric}", err=True)
    if stats.lines == 0:
        click.echo(f"{file}: no records to produce (the input is empty)", err=True)
        sys.exit(1)
    if stats.rejected:
        sys.exit(1)
