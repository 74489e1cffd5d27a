"""``evalfleet demo``: the whole fleet on this machine over the bundled samples."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

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
                    command=own_command(sys.argv[0], executable=sys.executable),
                    echo=lambda text: click.echo(text))
    sys.exit(code)


def own_command(argv0: str, *, executable: str) -> str:
    """How the shell that ran this command runs evalfleet again, as the user typed it.

    README command 1 runs ``.venv/bin/evalfleet`` without activating the virtual
    environment, so a bare ``evalfleet`` would not be found there.

    Args:
        argv0: The program as run (``sys.argv[0]``).
        executable: The running interpreter (``sys.executable``).

    Returns:
        ``evalfleet`` when it was found on the PATH, the script's path as typed
        (``.venv/bin/evalfleet``), else ``<interpreter> -m evalfleet``.
    """
    if Path(argv0).stem == "evalfleet":
        return "evalfleet" if "/" not in argv0 else shlex.quote(argv0)
    return f"{shlex.quote(executable)} -m evalfleet"
