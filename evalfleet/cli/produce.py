"""``evalfleet produce``: validate, sample, redact and enqueue samples from JSONL."""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from evalfleet.cli.context import CliState, pass_state
from evalfleet.core.errors import EvalfleetError, RetryLater
from evalfleet.core.gc_tuning import tune_collector

if TYPE_CHECKING:
    from producers.pipeline import Pipeline, ProduceStats
    from producers.runtime import ProducerRuntime

#: Seconds between progress lines on a terminal.
PROGRESS_INTERVAL_S = 0.5


@click.command()
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--metric", "metric_names", multiple=True,
              help="Metric to enqueue for (repeatable); default: those the sampling "
                   "config lists.")
@click.option("--sample-rate", type=click.FloatRange(0.0, 1.0), default=None,
              help="Share of samples to keep, by id hash, for every metric (overrides the "
                   "sampling config and EVALFLEET_SAMPLE_RATE).")
@click.option("--sampling-config", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Sampling config file (default: EVALFLEET_SAMPLING_CONFIG).")
@click.option("--follow", is_flag=True,
              help="Keep reading FILE as it grows, across rotation; resume where the last "
                   "run stopped. Stop with Ctrl-C or SIGTERM.")
@click.option("--offset-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="With --follow: where the position is kept (default: under "
                   "EVALFLEET_DATA_DIR/follow/).")
@click.option("--batch-size", type=click.IntRange(1, 100_000), default=None,
              help="Records per broker round trip (default: EVALFLEET_PRODUCER_BATCH_SIZE).")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=0,
              help="With --follow: serve Prometheus /metrics on this port (0: off).")
@click.option("--format", "input_format", type=click.Choice(["samples", "otlp-json"]),
              default="samples", show_default=True,
              help="samples: sample records (JSONL); otlp-json: OpenTelemetry traces as the "
                   "Collector's file exporter writes them, one request per line.")
@pass_state
def produce(state: CliState, file: str, metric_names: tuple[str, ...], sample_rate: float | None,
            sampling_config: Path | None, follow: bool, offset_file: Path | None,
            batch_size: int | None, metrics_port: int, input_format: str) -> None:
    """Validate, sample, redact and enqueue samples from a JSONL FILE (- for stdin).

    Bad lines are reported on stderr with their line number, id and field; the rest
    are enqueued. With --format otlp-json, FILE holds OpenTelemetry traces, mapped to
    samples as POST /v1/traces maps them. Exits 1 when any line was rejected or the
    broker stopped answering part way, 2 on usage errors and when the broker cannot be
    reached at all.
    """
    if follow and file == "-":
        raise click.UsageError("--follow needs a file, not stdin")
    if follow and input_format == "otlp-json":
        raise click.UsageError("--follow reads sample records; --format otlp-json reads a "
                               "file once")
    if not follow and file != "-" and not Path(file).exists():
        # As click.Path(exists=True) says it; a followed file may appear later.
        raise click.BadParameter(f"File {file!r} does not exist.", param_hint="'FILE'")
    runtime = _open_runtime(state, sampling_config=sampling_config, shared_dedupe=follow)
    try:
        metrics = _metric_names(runtime, metric_names)
        if input_format == "otlp-json":
            stats = _produce_traces(file, runtime=runtime, metrics=metrics, rate=sample_rate)
            _summarise(file, stats)
            sys.exit(1 if stats.rejected else 0)
        pipeline = runtime.pipeline(metrics=metrics, rate=sample_rate,
                                    source="follow" if follow else "file")
        size = batch_size or state.settings.limits.producer_batch_size
        if follow:
            if metrics_port:
                from prometheus_client import start_http_server

                start_http_server(metrics_port)
            tune_collector()  # a long-running producer, as `evalfleet ingest`
            stats = _follow(state, Path(file), pipeline=pipeline, batch_size=size,
                            offset_file=offset_file)
        else:
            stats = _produce_once(file, pipeline=pipeline, batch_size=size)
    finally:
        runtime.close()
    _summarise(file, stats)
    if stats.lines == 0 and not follow:
        click.echo(f"{file}: no records to produce (the input is empty)", err=True)
        sys.exit(1)
    if stats.rejected:
        sys.exit(1)


def _open_runtime(state: CliState, *, sampling_config: Path | None,
                  shared_dedupe: bool) -> ProducerRuntime:
    from producers.runtime import ProducerRuntime

    try:
        return ProducerRuntime(state.settings, sampling_config=sampling_config,
                               shared_dedupe=shared_dedupe)
    except EvalfleetError as exc:
        raise click.UsageError(str(exc)) from None


def _metric_names(runtime: ProducerRuntime, names: tuple[str, ...]) -> list[str] | None:
    """The --metric names, or None for the sampling config's (followed as it changes)."""
    try:
        metrics = [runtime.registry.get(name).name for name in dict.fromkeys(names)]
    except EvalfleetError as exc:
        raise click.UsageError(str(exc)) from None
    if not metrics and not runtime.reloader.current().metric_names:
        raise click.UsageError("give --metric NAME, or list metrics in the sampling config")
    return metrics or None


def _produce_traces(file: str, *, runtime: ProducerRuntime, metrics: list[str] | None,
                    rate: float | None) -> ProduceStats:
    from producers.pipeline import ProduceStats
    from producers.source import read_lines
    from producers.traces import SpanLimits
    from producers.traces.file import produce_otlp_lines

    settings = runtime.settings
    stats = ProduceStats()
    try:
        return produce_otlp_lines(
            read_lines(file),
            assembly=runtime.trace_assembly(runtime.trace_buffer(shared=False),
                                            metrics=metrics, rate=rate),
            limits=SpanLimits(max_attributes=settings.ingest.otlp_max_attributes_per_span,
                              max_value_bytes=settings.ingest.otlp_max_attribute_bytes),
            max_spans=settings.ingest.otlp_max_spans_per_request,
            on_error=lambda message: click.echo(f"{file}: {message}", err=True), stats=stats)
    except OSError as exc:
        raise click.FileError(file, str(exc)) from None


def _produce_once(file: str, *, pipeline: Pipeline, batch_size: int) -> ProduceStats:
    from producers.pipeline import ProduceStats, run_lines
    from producers.source import read_lines

    stats = ProduceStats()
    show_progress = file != "-" and sys.stderr.isatty()
    last_shown = [0.0]

    def progress(current: ProduceStats) -> None:
        now = time.monotonic()
        if show_progress and now - last_shown[0] >= PROGRESS_INTERVAL_S:
            last_shown[0] = now
            click.echo(f"\r{current.lines} lines, {current.jobs} jobs enqueued, "
                       f"{current.rejected} rejected", nl=False, err=True)

    try:
        run_lines(read_lines(file), pipeline=pipeline, batch_size=batch_size,
                  on_error=lambda error: click.echo(f"{file}: {error}", err=True),
                  on_progress=progress, stats=stats)
    except OSError as exc:
        raise click.FileError(file, str(exc)) from None
    except RetryLater as exc:
        if stats.lines == 0:  # never reached: a setup problem, explained by the boundary
            raise
        _summarise(file, stats)
        raise click.ClickException(
            f"{exc}; stopped after {stats.lines} records (those were enqueued); "
            "run again once the broker is back: repeats are judged once") from None
    if show_progress:
        click.echo("", err=True)
    return stats


def _follow(state: CliState, path: Path, *, pipeline: Pipeline, batch_size: int,
            offset_file: Path | None) -> ProduceStats:
    from producers.follow import follow
    from producers.offsets import OffsetStore, default_offset_path
    from producers.tail import Tail

    store = OffsetStore(offset_file or default_offset_path(state.settings.store.data_dir, path))
    try:
        start = store.load()
    except EvalfleetError as exc:
        raise click.UsageError(str(exc)) from None
    tail = Tail(path, start=start)
    where = f"line {start.line} (offset {start.offset})" if start else "its start"
    click.echo(f"{path}: following from {where}; position kept in {store.path}", err=True)
    stop = threading.Event()
    with _stop_on_signals(stop):
        try:
            return follow(tail, pipeline=pipeline, offsets=store, batch_size=batch_size,
                          stop=stop, on_error=lambda error: click.echo(str(error), err=True))
        except OSError as exc:
            raise click.FileError(str(path), str(exc)) from None
        finally:
            tail.close()


@contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    def handle(signum: int, frame: object) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _summarise(file: str, stats: ProduceStats) -> None:
    per_metric = ", ".join(f"{name} {count}" for name, count in stats.enqueued.items()) or "none"
    click.echo(f"{file}: {stats.lines} lines, {stats.accepted} valid, {stats.sampled_out} "
               f"sampled out, {stats.rejected} rejected; jobs enqueued: {per_metric}", err=True)
    if stats.shed:
        shed = ", ".join(f"{metric} [{segment}] {count}"
                         for (metric, segment), count in sorted(stats.shed.items()))
        click.echo(f"{file}: shed under backpressure (queue over its limit): {shed}", err=True)
    if stats.duplicates:
        dupes = ", ".join(f"{metric} {count}" for metric, count in stats.duplicates.items())
        click.echo(f"{file}: left out as duplicates within the window: {dupes}", err=True)
    if stats.redactions:
        kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(stats.redactions.items()))
        click.echo(f"{file}: redacted: {kinds}", err=True)
