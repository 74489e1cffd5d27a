"""``evalfleet metrics``: list metrics, show one rendered for a sample."""

from __future__ import annotations

import click

from evalfleet.cli.context import CliState, pass_state
from evalfleet.cli.jsonout import echo_json
from evalfleet.core.errors import EvalfleetError


@click.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
@click.pass_context
def metrics(ctx: click.Context, as_json: bool) -> None:
    """List the metrics with their queues and prompt versions (or see `show`)."""
    if ctx.invoked_subcommand is not None:
        return
    from evalfleet.core.metric import load_registry

    state = ctx.ensure_object(CliState)
    registry = load_registry(state.settings.judge.metrics_dir)
    if as_json:
        echo_json([{"name": m.name, "queue": m.queue, "prompt_version": m.version,
                    "scores": list(m.spec.scores), "file": str(m.path)} for m in registry])
        return
    for metric in registry:
        scores = ", ".join(metric.spec.scores)
        click.echo(f"{metric.name:<20} {metric.queue:<26} {metric.version}  scores: {scores}")


@metrics.command("show")
@click.argument("name")
@click.option("--sample", "sample_path",
              type=click.Path(exists=True, dir_okay=False, allow_dash=True),
              default=None, help="JSONL file (or -): render the messages for its first record.")
@pass_state
def metrics_show(state: CliState, name: str, sample_path: str | None) -> None:
    """Show metric NAME: its file, version, scores, and the messages a sample renders to."""
    from evalfleet.core.metric import load_registry
    from evalfleet.core.sample import parse_sample_line
    from producers.source import read_lines
    from workers.renderer import render_messages

    try:
        metric = load_registry(state.settings.judge.metrics_dir).get(name)
    except EvalfleetError as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(f"metric:  {metric.name} (queue {metric.queue}, prompt version {metric.version})")
    click.echo(f"file:    {metric.path}")
    click.echo(f"scores:  {', '.join(metric.spec.scores)}")
    fields = ", ".join(metric.spec.output.fields)
    click.echo(f"output:  {metric.spec.output.format}, fields {fields}")
    if sample_path is None:
        return
    first = next(((n, line) for n, line in read_lines(sample_path) if line.strip()), None)
    if first is None:
        raise click.UsageError(f"{sample_path}: no records")
    try:
        sample = parse_sample_line(first[1], record=f"line {first[0]}")
        messages = render_messages(metric, sample)
    except EvalfleetError as exc:
        raise click.ClickException(f"{sample_path}: {exc}") from None
    for message in messages:
        click.echo(f"\n----- {message['role']} -----\n{message['content']}")
