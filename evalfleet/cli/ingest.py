"""``evalfleet ingest``: the HTTP ingest service (ASGI, served by uvicorn)."""

from __future__ import annotations

from pathlib import Path

import click

from evalfleet.cli.context import CliState, pass_state
from evalfleet.core.errors import EvalfleetError
from evalfleet.core.gc_tuning import tune_collector
from evalfleet.core.log import install_secret_filter


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(1, 65535), default=8080, show_default=True)
@click.option("--metric", "metric_names", multiple=True,
              help="Metric to enqueue for (repeatable); default: those the sampling "
                   "config lists.")
@click.option("--sample-rate", type=click.FloatRange(0.0, 1.0), default=None,
              help="Share of samples to keep for every metric (overrides the sampling "
                   "config).")
@click.option("--sampling-config", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Sampling config file (default: EVALFLEET_SAMPLING_CONFIG).")
@click.option("--no-auth", is_flag=True,
              help="Accept requests without a bearer token (local development only).")
@click.option("--access-log/--no-access-log", default=False, show_default=True)
@pass_state
def ingest(state: CliState, host: str, port: int, metric_names: tuple[str, ...],
           sample_rate: float | None, sampling_config: Path | None, no_auth: bool,
           access_log: bool) -> None:
    """Serve POST /v1/samples: validate, sample, redact and enqueue samples sent over HTTP.

    Also POST /v1/traces (OTLP/HTTP): OpenTelemetry spans assembled per trace (in Redis,
    else in this process) and produced as samples. Tokens come from
    EVALFLEET_INGEST_TOKENS (comma-separated) or EVALFLEET_INGEST_TOKENS_FILE. Also
    serves /healthz, /readyz, /metrics and /openapi.json.
    """
    import uvicorn

    from producers.ingest import create_app, load_tokens
    from producers.runtime import ProducerRuntime
    from producers.traces.assembly import TraceSweeper
    from producers.traces.buffer import MemoryTraceBuffer

    settings = state.settings
    try:
        tokens = None if no_auth else load_tokens(settings)
        if tokens is not None and not tokens:
            raise click.UsageError("no ingest tokens: set EVALFLEET_INGEST_TOKENS or "
                                   "EVALFLEET_INGEST_TOKENS_FILE, or pass --no-auth")
        runtime = ProducerRuntime(settings, sampling_config=sampling_config)
        metrics = [runtime.registry.get(name).name for name in dict.fromkeys(metric_names)]
    except EvalfleetError as exc:
        raise click.UsageError(str(exc)) from None
    if not metrics and not runtime.reloader.current().metric_names:
        raise click.UsageError("give --metric NAME, or list metrics in the sampling config")
    install_secret_filter([*settings.secret_values(), *(tokens or [])])
    buffer = runtime.trace_buffer()
    traces = runtime.trace_assembly(buffer, metrics=metrics or None, rate=sample_rate)
    sweeper = TraceSweeper(traces, buffer=buffer)
    sweeper.start()
    app = create_app(runtime, tokens=tokens, metrics=metrics or None, rate=sample_rate,
                     traces=traces)
    tune_collector()
    click.echo(f"evalfleet ingest on http://{host}:{port} (POST /v1/samples, /v1/traces; "
               f"auth {'off' if tokens is None else 'on'})", err=True)
    if isinstance(buffer, MemoryTraceBuffer):
        click.echo("traces are assembled in this process's memory (no Redis): run one "
                   "ingest replica, and set EVALFLEET_SHARED_REDIS_URL for several", err=True)
    try:
        uvicorn.run(app, host=host, port=port, access_log=access_log, log_level="info")
    finally:
        sweeper.stop()
        runtime.close()
