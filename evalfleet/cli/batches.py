"""``evalfleet batches cancel|drain``: the open batches of batch judging (docs/batch.md)."""

from __future__ import annotations

import time

import click

from evalfleet.cli.context import CliState, open_existing_store, pass_state, require_schema


@click.group()
def batches() -> None:
    """Batch judging: cancel open batches, or drain the spool now."""


@batches.command()
@pass_state
def cancel(state: CliState) -> None:
    """Ask the provider to cancel every open batch. The beat then collects what each
    finished; the rest goes back to the queue with its attempt counted."""
    from evalfleet.core.errors import JudgeError
    from evalfleet.store import SqlStore
    from evalfleet.store.queries.batchspool import BatchSpool
    from workers.batchjudge.rounds import batch_api

    settings = state.settings
    require_schema(settings)
    store = open_existing_store(settings.resolved_database_url(), pool_size=1)
    api = batch_api(settings)
    try:
        assert isinstance(store, SqlStore)
        open_batches = BatchSpool(store).batches("open")
        for batch in open_batches:
            assert batch.provider_id is not None
            try:
                answer = api.cancel(batch.provider_id)
                click.echo(f"{batch.provider_id}: {answer.get('status')}")
            except JudgeError as exc:
                click.echo(f"{batch.provider_id}: not cancelled: {exc}", err=True)
        click.echo(f"{len(open_batches)} open batch(es) asked to cancel", err=True)
    finally:
        api.close()
        store.close()


@batches.command()
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0), default=3600.0,
              show_default=True, help="Give up after this many seconds (exit 1).")
@click.option("--interval", "interval_s", type=click.FloatRange(min=0.1), default=5.0,
              show_default=True, help="Seconds between rounds.")
@pass_state
def drain(state: CliState, timeout_s: float, interval_s: float) -> None:
    """Send every spooled job now (without waiting for a full batch) and collect until no
    batch-mode job is left, as the beat's rounds do (it takes their lock)."""
    from evalfleet.broker.publish import QueuePublisher
    from evalfleet.store.queries.batchspool import BatchSpool
    from workers.app import create_app
    from workers.batchjudge.rounds import BatchRounds
    from workers.runtime import LazyRuntime

    settings = state.settings.model_copy(update={"batch_max_wait_s": 0.0})
    require_schema(settings)
    runtime = LazyRuntime(settings, concurrency=1)
    app = create_app(settings, concurrency=1)  # publishes as the beat does; consumes nothing
    requeue = QueuePublisher(app, settings)
    rounds = BatchRounds(settings, runtime=runtime.get,
                         publish=lambda job, countdown_s: requeue.publish([job],
                                                                          countdown_s=countdown_s))
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            click.echo(rounds.run(), err=True)
            summary = BatchSpool(runtime.get().store).summary()  # type: ignore[arg-type]
            if not (summary.waiting or summary.in_batches):
                click.echo("drained: no batch-mode job is left", err=True)
                return
            if time.monotonic() > deadline:
                raise click.ClickException(f"not drained after {timeout_s:g}s: "
                                           f"{summary.waiting} waiting, {summary.in_batches} "
                                           "in batches")
            time.sleep(interval_s)
    finally:
        app.close()
