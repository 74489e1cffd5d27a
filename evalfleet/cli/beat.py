"""``evalfleet beat``: the alert engine's clock and its single worker, in one process;
it also feeds the drift canaries."""

from __future__ import annotations

import click

from evalfleet.cli.context import CliState, open_existing_store, pass_state, require_schema
from evalfleet.core.errors import EvalfleetError


@click.command()
@click.option("--loglevel", "-l", default="INFO", show_default=True)
@pass_state
def beat(state: CliState, loglevel: str) -> None:
    """Evaluate the alert rules every EVALFLEET_ALERT_TICK_S seconds and deliver notifications.

    Runs Celery beat embedded in a one-slot worker on the evalfleet.alerts queue. Every
    EVALFLEET_CANARY_INTERVAL_S seconds it also feeds each metric's queue
    EVALFLEET_CANARY_SAMPLES gold samples as drift canaries (0 turns them off); every
    EVALFLEET_BATCH_POLL_S it sends spooled batch-mode jobs as batches and collects
    finished ones (one beat of the fleet at a time, by a lock in Redis); every hour it
    creates the verdict tables' daily partitions a week ahead (Postgres). Safe to
    run twice: each rule is evaluated once per cycle, each transition notified once, and
    each canary judged once.
    """
    from prometheus_client import REGISTRY

    from evalfleet.alerts import load_rule_set
    from evalfleet.alerts.schedule import (
        ALERT_QUEUE,
        register_alert_beat,
        register_canary_beat,
        register_partition_beat,
    )
    from evalfleet.alerts.telemetry import default_alert_telemetry
    from evalfleet.broker.publish import QueuePublisher
    from evalfleet.broker.queues import is_redis
    from evalfleet.calibration.canary import CanaryFeeder
    from evalfleet.core.message import queue_for
    from evalfleet.core.metric import load_registry
    from evalfleet.store import SqlStore
    from evalfleet.store.queries.batchspool import BatchSpool
    from producers.enqueuer import Enqueuer
    from workers.app import create_app
    from workers.batchjudge.gauges import BatchGauges
    from workers.batchjudge.rounds import BatchRounds, register_batch_beat
    from workers.runtime import LazyRuntime
    from workers.telemetry import start_metrics_server

    settings = state.settings
    try:
        load_rule_set(settings)  # fail now, not on the first tick
    except EvalfleetError as exc:
        raise click.UsageError(str(exc)) from None
    require_schema(settings)
    app = create_app(settings, concurrency=1)
    register_alert_beat(app, settings)
    register_partition_beat(app, settings)
    if settings.alerts.canary_interval_s:
        enqueuer = Enqueuer(settings)  # the process's own, for its lifetime
        register_canary_beat(app, settings,
                             feed=CanaryFeeder(settings, send=enqueuer.send_many).feed)
    # Collected jobs go back to their queues from this app, declared as workers declare
    # them (quorum queues on RabbitMQ): no producer in the beat.
    requeue = QueuePublisher(app, settings)
    register_batch_beat(app, settings, queue=ALERT_QUEUE, rounds=BatchRounds(
        settings, runtime=LazyRuntime(settings, concurrency=1).get,
        publish=lambda job, countdown_s: requeue.publish([job], countdown_s=countdown_s)))
    default_alert_telemetry()
    gauge_store = open_existing_store(settings.resolved_database_url(), pool_size=1)
    if isinstance(gauge_store, SqlStore):
        REGISTRY.register(BatchGauges(BatchSpool(gauge_store)))
    queues = [queue_for(name) for name in load_registry(settings.judge.metrics_dir).names()]
    start_metrics_server(settings.worker.metrics_port, queues=queues,
                         redis_url=settings.resolved_broker_url() if is_redis(settings) else None)
    settings.store.data_dir.mkdir(parents=True, exist_ok=True)
    app.worker_main([
        "worker", "--beat", "--queues", ALERT_QUEUE, "--concurrency", "1", "--pool", "solo",
        "--schedule", str(settings.store.data_dir / "celerybeat-schedule"), "--loglevel", loglevel,
        "--hostname", "evalfleet-alerts@%h",
        "--without-gossip", "--without-mingle", "--without-heartbeat",
    ])
