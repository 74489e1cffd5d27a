"""The ``evalfleet`` command line: one thin module per command, settings built once."""

from __future__ import annotations

import click

from evalfleet.cli.alerts import alerts
from evalfleet.cli.batches import batches
from evalfleet.cli.beat import beat
from evalfleet.cli.boundary import FleetGroup
from evalfleet.cli.calibrate import calibrate
from evalfleet.cli.context import CliState
from evalfleet.cli.dataset import dataset
from evalfleet.cli.dead_letters import dead_letters
from evalfleet.cli.demo import demo
from evalfleet.cli.health import worker_health
from evalfleet.cli.ingest import ingest
from evalfleet.cli.judge import judge
from evalfleet.cli.judge_sim import judge_sim
from evalfleet.cli.metrics import metrics
from evalfleet.cli.produce import produce
from evalfleet.cli.purge import purge
from evalfleet.cli.review import review
from evalfleet.cli.status import status
from evalfleet.cli.store import cost, export, migrate
from evalfleet.cli.ui import ui
from evalfleet.cli.worker import worker
from evalfleet.core.log import configure_logging

__all__ = ["main"]


@click.group(cls=FleetGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="evalfleet", prog_name="evalfleet")
@click.option("--log-level", default="WARNING", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
@click.pass_context
def main(ctx: click.Context, log_level: str) -> None:
    """evalfleet: judge sampled production traffic with an LLM, store verdicts, alert on drops.

    Configuration comes from the environment and .env (see docs/configuration.md). A bad setup is
    explained in one line with exit status 2; `--log-level debug` adds the traceback.
    """
    state = ctx.ensure_object(CliState)
    state.debug = log_level.upper() == "DEBUG"
    configure_logging(level=log_level, secrets=_secrets_of(state))


def _secrets_of(state: CliState) -> list[str]:
    try:
        return state.settings.secret_values()
    except click.ClickException:  # reported by the command that needs the settings
        return []


for _command in (migrate, produce, worker, export, cost, metrics, demo, judge_sim, alerts, beat,
                 calibrate, judge, batches,
                 ingest, status, dead_letters, purge, worker_health, ui, review, dataset):
    main.add_command(_command)
