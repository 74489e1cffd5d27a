"""``evalfleet worker``: run a Celery worker on some metric queues."""

from __future__ import annotations

import click

from evalfleet.cli.context import CliState, pass_state
from evalfleet.errors import EvalfleetError


@click.command()
@click.option("--queues", "-Q", required=True,
              help="Metric names to consume, comma-separated (queue eval.<metric> each).")
@click.option("--concurrency", "-c", type=click.IntRange(1, 4096), default=None,
              help="Judge calls in flight in this process "
                   "(default: EVALFLEET_WORKER_CONCURRENCY).")
@click.option("--loglevel", "-l", default="INFO", show_default=True)
@pass_state
def worker(state: CliState, queues: str, concurrency: int | None, loglevel: str) -> None:
    """Run a worker that judges jobs from the given metric queues.

    One process keeps CONCURRENCY judge calls in flight on one asyncio loop;
    Celery's thread pool only hands it batches (see the README's Performance).
    """
    from evalfleet.message import queue_for
    from evalfleet.metric import load_registry
    from workers.app import create_app
    from workers.runtime import task_slots

    registry = load_registry(state.settings.metrics_dir)
    names = [name.strip() for name in queues.split(",") if name.strip()]
    try:
        for name in names:
            registry.get(name)
    except EvalfleetError as exc:
        raise click.UsageError(str(exc)) from None
    settings = state.settings
    concurrency = concurrency or settings.worker_concurrency
    app = create_app(settings, concurrency=concurrency)
    if settings.metrics_port:
        from evalfleet.broker import is_redis
        from workers.telemetry import start_metrics_server

        start_metrics_server(
            settings.metrics_port, queues=[queue_for(name) for name in names],
            redis_url=settings.resolved_broker_url() if is_redis(settings) else None)
    app.worker_main([
        "worker", "--queues", ",".join(queue_for(name) for name in names),
        "--concurrency", str(task_slots(settings, concurrency=concurrency)),
        "--pool", "threads", "--loglevel", loglevel,
        "--hostname", f"evalfleet-{'-'.join(names)}@%h",
        # Gossip, mingle and heartbeats cost broker traffic and buy nothing here.
        "--without-gossip", "--without-mingle", "--without-heartbeat",
    ])
