"""``evalfleet demo``: the whole fleet on this machine over the bundled samples."""

from __future__ import annotations

import sys

import click

from evalfleet.cli.context import CliState, pass_state


@click.command()
@click.option("--samples", "samples_path", default=None,
              type=click.Path(exists=True, dir_okay=False),
              help="JSONL file to use instead of the bundled sample set.")
@click.option("--concurrency", type=click.IntRange(1, 1024), default=16, show_default=True)
@pass_state
def demo(state: CliState, samples_path: str | None, concurrency: int) -> None:
    """Run producer, a worker and the judge on this machine and print a summary.

    With no database or broker configured it uses the embedded defaults (a SQLite
    file and a file-system broker under .evalfleet/demo); with no OPENAI_BASE_URL
    it starts the judge simulator, and the scores are simulated.
    """
    from evalfleet.demo.runner import run_demo

    code = run_demo(state.settings, samples_path=samples_path, concurrency=concurrency,
                    echo=lambda text: click.echo(text))
    sys.exit(code)
