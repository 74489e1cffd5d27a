"""``evalfleet worker``: run a Celery worker on some metric queues."""

from __future__ import annotations

import os

import click

from evalfleet.cli.context import CliState, pass_state, require_schema
from evalfleet.core.errors import EvalfleetError


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
    Celery's thread pool only hands it batches (see docs/performance.md).
    SIGTERM: no new jobs; running ones get EVALFLEET_SHUTDOWN_GRACE_S to finish,
    then go back to the queue. EVALFLEET_HEALTH_PORT serves /livez and /readyz.
    """
    from evalfleet.broker.queues import is_redis
    from evalfleet.core.message import queue_for
    from evalfleet.core.metric import load_registry
    from workers.app import create_app, prepare_worker
    from workers.health import WorkerActivity, WorkerHealth, serve_health
    from workers.runtime import task_slots
    from workers.shutdown import ShutdownDeadline
    from workers.telemetry import start_metrics_server

    registry = load_registry(state.settings.judge.metrics_dir)
    names = [name.strip() for name in queues.split(",") if name.strip()]
    try:
        for name in names:
            registry.get(name)
    except EvalfleetError as exc:
        raise click.UsageError(str(exc)) from None
    settings = state.settings
    require_schema(settings)
    concurrency = concurrency or settings.worker.worker_concurrency
    queue_names = [queue_for(name) for name in names]
    activity, deadline = WorkerActivity(), ShutdownDeadline()
    app = create_app(settings, concurrency=concurrency, activity=activity, deadline=deadline,
                     queues=queue_names)
    prepare_worker(app, settings, activity=activity, deadline=deadline)
    if settings.worker.health_port:
        serve_health(WorkerHealth.from_settings(settings, activity=activity,
                                                queues=queue_names),
                     port=settings.worker.health_port)
    if settings.worker.metrics_port:
        start_metrics_server(
            settings.worker.metrics_port, queues=queue_names,
            redis_url=settings.resolved_broker_url() if is_redis(settings) else None)
    app.worker_main([
        "worker", "--queues", ",".join(queue_names),
        "--concurrency", str(task_slots(settings, concurrency=concurrency)),
        "--pool", "threads", "--loglevel", loglevel,
        # The pid keeps node names apart when several workers share a host: pausing a
        # queue (an access error) is addressed to one node and must stop only that one.
        "--hostname", f"evalfleet-{'-'.join(names)}-{os.getpid()}@%h",
        # Gossip, mingle and heartbeats cost broker traffic and buy nothing here.
        "--without-gossip", "--without-mingle", "--without-heartbeat",
    ])
