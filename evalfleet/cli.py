"""The ``evalfleet`` command line: one thin command per job, settings built once here."""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime, timedelta

import click
from pydantic import ValidationError

from evalfleet.errors import EvalfleetError
from evalfleet.log import configure_logging
from evalfleet.settings import Settings

#: Seconds between progress lines on a terminal.
PROGRESS_INTERVAL_S = 0.5

#: Relative time units accepted by --since / --until.
_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class _Context:
    def __init__(self) -> None:
        self._settings: Settings | None = None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            try:
                self._settings = Settings()
            except ValidationError as exc:
                problems = "; ".join(
                    f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}"
                    for error in exc.errors()
                )
                raise click.ClickException(f"invalid settings: {problems}") from None
        return self._settings


pass_context = click.make_pass_decorator(_Context, ensure=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--log-level", default="WARNING", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
@click.pass_context
def main(ctx: click.Context, log_level: str) -> None:
    """evalfleet: judge sampled production traffic with an LLM, store verdicts, alert on drops.

    Configuration comes from the environment and .env (see the README).
    """
    state = ctx.ensure_object(_Context)
    configure_logging(level=log_level, secrets=_secrets_of(state))


def _secrets_of(state: _Context) -> list[str]:
    try:
        return state.settings.secret_values()
    except click.ClickException:  # reported by the command that needs the settings
        return []


@main.command()
@pass_context
def migrate(state: _Context) -> None:
    """Create or upgrade the verdict store's schema (Alembic)."""
    from workers.store import migrate as run_migrations
    from workers.store import open_store

    store = open_store(state.settings.resolved_database_url())
    try:
        run_migrations(store.engine)
    finally:
        store.close()
    click.echo(f"schema is up to date ({store.engine.url.render_as_string(hide_password=True)})")


@main.command()
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--metric", "metric_names", multiple=True, required=True,
              help="Metric to enqueue for (repeatable).")
@click.option("--sample-rate", type=click.FloatRange(0.0, 1.0), default=None,
              help="Share of samples to keep, by id hash (default: EVALFLEET_SAMPLE_RATE).")
@pass_context
def produce(state: _Context, file: str, metric_names: tuple[str, ...],
            sample_rate: float | None) -> None:
    """Validate, sample and enqueue samples from a JSONL FILE (- for stdin).

    Bad lines are reported on stderr with their line number and field; the rest
    are enqueued. Exits 1 when any line was rejected, 2 on usage errors.
    """
    from evalfleet.metric import load_registry
    from producers.enqueuer import Enqueuer
    from producers.pipeline import ProduceStats
    from producers.pipeline import produce as run_produce
    from producers.source import read_lines

    registry = load_registry(state.settings.metrics_dir)
    try:
        metrics = [registry.get(name) for name in dict.fromkeys(metric_names)]
    except EvalfleetError as exc:
        raise click.UsageError(str(exc)) from None
    rate = state.settings.sample_rate if sample_rate is None else sample_rate
    show_progress = file != "-" and sys.stderr.isatty()
    last_shown = [0.0]

    def progress(stats: ProduceStats) -> None:
        now = time.monotonic()
        if show_progress and now - last_shown[0] >= PROGRESS_INTERVAL_S:
            last_shown[0] = now
            click.echo(f"\r{stats.lines} lines, {stats.jobs} jobs enqueued, "
                       f"{stats.rejected} rejected", nl=False, err=True)

    def report(error: EvalfleetError) -> None:
        click.echo(f"{file}: {error}", err=True)

    enqueuer = Enqueuer(state.settings)
    try:
        stats = run_produce(read_lines(file), metrics=metrics, rate=rate, send=enqueuer.send,
                            on_error=report, on_progress=progress)
    except OSError as exc:
        raise click.FileError(file, str(exc)) from None
    finally:
        enqueuer.close()
    if show_progress:
        click.echo("", err=True)
    per_metric = ", ".join(f"{name} {count}" for name, count in stats.enqueued.items()) or "none"
    click.echo(f"{file}: {stats.lines} lines, {stats.accepted} valid, {stats.sampled_out} "
               f"sampled out, {stats.rejected} rejected; jobs enqueued: {per_metric}", err=True)
    if stats.lines == 0:
        click.echo(f"{file}: no records to produce (the input is empty)", err=True)
        sys.exit(1)
    if stats.rejected:
        sys.exit(1)


@main.command()
@click.option("--queues", "-Q", required=True,
              help="Metric names to consume, comma-separated (queue eval.<metric> each).")
@click.option("--concurrency", "-c", type=click.IntRange(1, 4096), default=None,
              help="Jobs in flight in this process (default: EVALFLEET_WORKER_CONCURRENCY).")
@click.option("--pool", type=click.Choice(["threads", "prefork", "solo"]), default="threads",
              show_default=True, help="Celery execution pool.")
@click.option("--loglevel", "-l", default="INFO", show_default=True)
@pass_context
def worker(state: _Context, queues: str, concurrency: int | None, pool: str,
           loglevel: str) -> None:
    """Run a worker that judges jobs from the given metric queues."""
    from evalfleet.message import queue_for
    from evalfleet.metric import load_registry
    from workers.app import create_app

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
    app.worker_main([
        "worker", "--queues", ",".join(queue_for(name) for name in names),
        "--concurrency", str(concurrency), "--pool", pool, "--loglevel", loglevel,
        "--hostname", f"evalfleet-{'-'.join(names)}@%h",
        # Gossip, mingle and heartbeats cost broker traffic and buy nothing here.
        "--without-gossip", "--without-mingle", "--without-heartbeat",
    ])


@main.command()
@click.option("--metric", default=None, help="Only this metric.")
@click.option("--since", default=None, help="Created at or after: ISO 8601 time or 15m/2h/7d ago.")
@click.option("--until", default=None, help="Created before: ISO 8601 time or 15m/2h/7d ago.")
@pass_context
def export(state: _Context, metric: str | None, since: str | None, until: str | None) -> None:
    """Write verdicts to stdout as JSONL, oldest first."""
    from workers.store import open_store
    from workers.store.export import export_row

    try:
        since_at, until_at = parse_time(since), parse_time(until)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    store = open_store(state.settings.resolved_database_url())
    out = sys.stdout
    try:
        for record in store.iter_verdicts(metric=metric, since=since_at, until=until_at):
            out.write(json.dumps(export_row(record), ensure_ascii=False) + "\n")
    finally:
        store.close()


@main.group(invoke_without_command=True)
@click.pass_context
def metrics(ctx: click.Context) -> None:
    """List the metrics with their queues and prompt versions (or see `show`)."""
    if ctx.invoked_subcommand is not None:
        return
    from evalfleet.metric import load_registry

    state = ctx.ensure_object(_Context)
    for metric in load_registry(state.settings.metrics_dir):
        scores = ", ".join(metric.spec.scores)
        click.echo(f"{metric.name:<20} {metric.queue:<26} {metric.version}  scores: {scores}")


@metrics.command("show")
@click.argument("name")
@click.option("--sample", "sample_path", type=click.Path(dir_okay=False, allow_dash=True),
              default=None, help="JSONL file (or -): render the messages for its first record.")
@pass_context
def metrics_show(state: _Context, name: str, sample_path: str | None) -> None:
    """Show metric NAME: its file, version, scores, and the messages a sample renders to."""
    from evalfleet.metric import load_registry
    from evalfleet.sample import parse_sample_line
    from producers.source import read_lines
    from workers.renderer import render_messages

    try:
        metric = load_registry(state.settings.metrics_dir).get(name)
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


@main.command()
@click.option("--samples", "samples_path", default=None, type=click.Path(dir_okay=False),
              help="JSONL file to use instead of the bundled sample set.")
@click.option("--concurrency", type=click.IntRange(1, 1024), default=16, show_default=True)
@pass_context
def demo(state: _Context, samples_path: str | None, concurrency: int) -> None:
    """Run producer, a worker and the judge on this machine and print a summary.

    With no database or broker configured it uses the embedded defaults (a SQLite
    file and a file-system broker under .evalfleet/demo); with no OPENAI_BASE_URL
    it starts the judge simulator, and the scores are simulated.
    """
    from evalfleet.demo.runner import run_demo

    code = run_demo(state.settings, samples_path=samples_path, concurrency=concurrency,
                    echo=lambda text: click.echo(text))
    sys.exit(code)


@main.command("judge-sim")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8400, show_default=True, help="0 picks a free port.")
@click.option("--latency", type=click.Choice(["fixed", "uniform", "lognormal"]), default=None,
              help="Latency distribution (default fixed).")
@click.option("--latency-ms", type=float, default=None, help="Fixed latency.")
@click.option("--latency-min-ms", type=float, default=None, help="Uniform: lower bound.")
@click.option("--latency-max-ms", type=float, default=None, help="Uniform: upper bound.")
@click.option("--latency-median-ms", type=float, default=None, help="Lognormal: median.")
@click.option("--latency-p99-ms", type=float, default=None, help="Lognormal: 99th percentile.")
@click.option("--rate-limit-rate", type=float, default=None, help="Share answered 429.")
@click.option("--retry-after-s", type=float, default=None, help="Retry-After sent with a 429.")
@click.option("--server-error-rate", type=float, default=None, help="Share answered 500.")
@click.option("--hang-rate", type=float, default=None, help="Share that hang.")
@click.option("--hang-s", type=float, default=None, help="How long a hang lasts.")
@click.option("--malformed-rate", type=float, default=None, help="Share with broken JSON.")
@click.option("--truncated-rate", type=float, default=None, help="Share cut off (length).")
@click.option("--rpm-limit", type=int, default=None, help="Requests per minute before 429s.")
@click.option("--seed", type=int, default=None, help="Seed of the fault and latency draws.")
def judge_sim(host: str, port: int, **options: object) -> None:
    """Run the judge simulator: an OpenAI-compatible judge with faults on demand.

    Runtime changes: PUT /_sim/config; counters: GET /_sim/stats.
    """
    from evalfleet.judgesim import InvalidSimConfig, run_judge_sim

    try:
        run_judge_sim(host=host, port=port, **options)
    except InvalidSimConfig as exc:
        raise click.UsageError(str(exc)) from None


def parse_time(text: str | None, *, now: datetime | None = None) -> datetime | None:
    """Parse an ISO 8601 time (zone required) or a relative ``15m``/``2h``/``7d`` ago.

    Raises:
        ValueError: When ``text`` is neither.
    """
    if text is None:
        return None
    now = now or datetime.now(UTC)
    unit = _UNITS_S.get(text[-1:])
    if unit is not None and text[:-1].isdigit():
        return now - timedelta(seconds=int(text[:-1]) * unit)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO 8601 time or a duration like 15m") from None
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} has no timezone; add Z or +00:00")
    return moment

