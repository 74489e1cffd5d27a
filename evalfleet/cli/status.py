"""``evalfleet status``: queues, rates, lag, failures and workers needed, per metric queue."""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from evalfleet.cli.alerts import render_table
from evalfleet.cli.context import CliState, open_existing_store, pass_state
from evalfleet.core.durations import format_age, format_duration, format_moment, parse_duration
from evalfleet.core.errors import EvalfleetError

if TYPE_CHECKING:
    from evalfleet.core.settings import Settings
    from evalfleet.ops.fleet_status import FleetStatus, QueueStatus
    from evalfleet.ops.monitor import MonitorOptions
    from evalfleet.store.queries.batchspool import BatchSpool
    from producers.traces.sessions import SessionBuffer

#: ANSI: cursor home and clear screen, between --watch refreshes on a terminal.
_CLEAR = "\x1b[H\x1b[2J"


def parse_duration_s(text: str) -> float:
    """Seconds in a duration option (:mod:`evalfleet.core.durations`).

    Raises:
        click.BadParameter: When ``text`` is not a duration.
    """
    try:
        return parse_duration(text).total_seconds()
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command()
@click.option("--metric", "metrics", multiple=True,
              help="Only this metric (repeatable); default: every metric.")
@click.option("--window", default="5m", show_default=True,
              help="Rates, lag and failures over this recent window (30s, 5m, 1h).")
@click.option("--concurrency", type=click.IntRange(1, 65536), default=None,
              help="Judge calls in flight per worker (default: EVALFLEET_WORKER_CONCURRENCY).")
@click.option("--drain", default="15m", show_default=True,
              help="The drain recommendation clears the current backlog within this time.")
@click.option("--sample", "sample_text", default="2s", show_default=True,
              help="Gap between the two queue readings arrivals come from (0: one reading, "
                   "arrivals taken as completions).")
@click.option("--watch", is_flag=True, help="Refresh every --interval until interrupted.")
@click.option("--interval", type=click.FloatRange(min=0.1), default=5.0, show_default=True,
              help="Seconds between refreshes with --watch.")
@click.option("--count", type=click.IntRange(min=1), default=None,
              help="With --watch: stop after this many refreshes.")
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON (one object per refresh) instead of a table.")
@pass_state
def status(state: CliState, metrics: tuple[str, ...], window: str, concurrency: int | None,
           drain: str, sample_text: str, watch: bool, interval: float, count: int | None,
           as_json: bool) -> None:
    """Per metric queue: depth, jobs in flight, arrival and completion rates, oldest job,
    verdict lag, judge call latency, the share of prompt tokens the judge served from its
    prompt cache, failures by error class, and the worker processes needed; below it,
    batch judging when there is any (docs/batch.md).

    Workers come from Little's law: arrivals x judge calls per job x call latency /
    calls in flight per worker, capped by the judge's rate limits.
    """
    from evalfleet.broker.probe import open_queue_probe
    from evalfleet.ops.monitor import StatusMonitor
    from evalfleet.store import SqlStore
    from evalfleet.store.queries.batchspool import BatchSpool

    settings = state.settings
    options = monitor_options(settings, metrics=metrics, window_s=parse_duration_s(window),
                              concurrency=concurrency or settings.worker.worker_concurrency,
                              drain_s=parse_duration_s(drain))
    sample_s = parse_duration_s(sample_text)
    store = open_existing_store(settings.resolved_read_database_url(), pool_size=1)
    probe = open_queue_probe(settings)
    monitor = StatusMonitor(store=store, probe=probe, options=options)
    batches = BatchSpool(store) if isinstance(store, SqlStore) else None
    sessions = session_reader(settings)
    frames = (count or sys.maxsize) if watch else 1
    try:
        if sample_s > 0:
            monitor.sample()
            time.sleep(sample_s)
        for frame in range(frames):
            if frame:
                time.sleep(interval)
            _show(monitor.observe(), as_json=as_json, clear=watch and not as_json,
                  batches=batches, sessions=sessions)
    except KeyboardInterrupt:
        pass
    finally:
        probe.close()
        store.close()


def monitor_options(settings: Settings, *, metrics: tuple[str, ...], window_s: float,
                    concurrency: int, drain_s: float) -> MonitorOptions:
    """What to watch: the metrics, their judge models and those models' rate limits.

    Raises:
        click.UsageError: For an unknown metric.
    """
    from evalfleet.core.checkspec import check_model, is_check_model
    from evalfleet.core.metric import load_registry
    from evalfleet.core.ratelimit import RateLimit
    from evalfleet.ops.fleet_status import cascade_endpoints
    from evalfleet.ops.monitor import MonitorOptions

    registry = load_registry(settings.judge.metrics_dir)
    try:
        chosen = [registry.get(name) for name in metrics] if metrics else list(registry)
    except EvalfleetError as exc:
        raise click.UsageError(str(exc)) from None
    # A check metric calls no judge: it shares no judge's rate limit or capacity.
    models = {metric.name: check_model("*") if metric.spec.kind == "check" else
              settings.judge_model_for(metric.name, metric_default=metric.spec.judge.main_model)
              for metric in chosen}
    limits = {model: RateLimit() if is_check_model(model) else settings.rate_limit_for(model)
              for model in set(models.values())}
    endpoints = {metric.name: cascade_endpoints(metric, endpoints=settings.judge.judge_endpoints,
                                                default_url=settings.judge.openai_base_url)
                 for metric in chosen if metric.spec.judge.cascade}
    return MonitorOptions(metrics=tuple(models), models=models, limits=limits,
                          window_s=window_s, concurrency=concurrency, drain_s=drain_s,
                          endpoints=endpoints)


def _show(fleet: FleetStatus, *, as_json: bool, clear: bool,
          batches: BatchSpool | None = None, sessions: SessionBuffer | None = None) -> None:
    from evalfleet.ops.fleet_status import status_json

    batch_view = batch_status(batches) if batches is not None else None
    session_view = session_status(sessions) if sessions is not None else None
    if as_json:
        click.echo(json.dumps({**status_json(fleet), **({"batches": batch_view}
                                                        if batch_view else {}),
                               **({"sessions": session_view} if session_view else {})}))
        return
    text = render_status(fleet)
    if batch_view:
        text += "\n\n" + render_batches(batch_view)
    if session_view:
        oldest = session_view["oldest_age_s"]
        text += (f"\n\nconversations: {session_view['open']:,} session(s) held by the ingest "
                 f"(open, or judged and waiting out their final wait), the oldest begun "
                 f"{format_age(oldest) if oldest is not None else '-'} ago")
    click.echo((_CLEAR if clear and sys.stdout.isatty() else "") + text)


def session_reader(settings: Settings) -> SessionBuffer | None:
    """The ingest's session buffer in the shared Redis; None without one (an ingest
    without Redis holds its sessions in its own memory, out of reach)."""
    import redis

    from producers.traces.sessions import RedisSessionBuffer, SessionTiming

    url = settings.resolved_shared_redis_url()
    if url is None:
        return None
    timeout_s = settings.limits.producer_broker_timeout_s
    return RedisSessionBuffer(redis.Redis.from_url(url, socket_timeout=timeout_s,
                                                   socket_connect_timeout=timeout_s),
                              timing=SessionTiming())


def session_status(buffer: SessionBuffer) -> dict[str, Any] | None:
    """Conversations as ``evalfleet status --json`` shows them: sessions held and the age
    of the oldest's first turn; None when none is held or Redis does not answer."""
    try:
        held = buffer.open_sessions()
        first = buffer.oldest_first_s()
    except EvalfleetError:
        return None
    if not held:
        return None
    return {"open": held, "oldest_age_s": None if first is None else max(
        0.0, time.time() - first)}


def batch_status(spool: BatchSpool) -> dict[str, Any] | None:
    """Batch judging as ``evalfleet status --json`` shows it; None when there has been
    none (no batch and nothing spooled)."""
    summary = spool.summary()
    cost, saved = spool.saved()
    if not (summary.waiting or summary.in_batches or summary.open_batches or cost):
        return None
    now = datetime.now(UTC)
    oldest = summary.oldest_spooled_at
    return {
        "waiting": summary.waiting, "in_batches": summary.in_batches,
        "oldest_job_age_s": (now - oldest).total_seconds() if oldest else None,
        "cost_usd": cost, "saved_usd": saved,
        "open": [{"id": b.provider_id or b.id, "judge_model": b.judge_model,
                  "state": b.state, "status": b.status,
                  "age_s": (now - b.created_at).total_seconds(), "requests": b.requests,
                  "completed": b.completed, "failed": b.failed}
                 for b in summary.open_batches],
    }


def render_batches(view: dict[str, Any]) -> str:
    """Batch judging under the status table: open batches, what waits, what it saved."""
    oldest = view["oldest_job_age_s"]
    head = (f"batch judging: {view['waiting']:,} job(s) waiting for a batch, "
            f"{view['in_batches']:,} in batches, oldest unfinished "
            f"{format_age(oldest) if oldest is not None else '-'}; verdicts cost "
            f"${view['cost_usd']:.4f}, saved ${view['saved_usd']:.4f} against "
            f"synchronous prices")
    if not view["open"]:
        return head
    rows = [[b["id"], b["judge_model"], b["status"] or b["state"], format_age(b["age_s"]),
             f"{b['requests']:,}", f"{b['completed']:,}", f"{b['failed']:,}"]
            for b in view["open"]]
    return "\n".join([head, render_table(
        ["batch", "judge model", "status", "age", "requests", "done", "failed"], rows)])


def render_status(fleet: FleetStatus) -> str:
    """The status as a table with notes below it."""
    at = fleet.at.isoformat(timespec="seconds").replace("+00:00", "Z")
    header = (f"evalfleet status at {at}: rates over the last {format_duration(fleet.window_s)}, "
              f"{fleet.concurrency} judge calls in flight per worker, drain within "
              f"{format_duration(fleet.drain_s)}")
    columns = ["queue", "waiting", "in flight", "oldest", "arrive/s", "done/s", "lag",
               "judge call", "cached", "failed", "workers", "to drain"]
    rows = [_row(queue) for queue in fleet.queues]
    notes = [note for queue in fleet.queues for note in _notes(queue)]
    notes.extend(_identity_notes(fleet))
    return "\n".join([header, "", render_table(columns, rows), *(["", *notes] if notes else [])])


def _row(queue: QueueStatus) -> list[str]:
    advice = queue.recommendation
    failed = sum(f.share for f in queue.failures)
    mark = "*" if advice.rate_limited else ""
    return [
        queue.queue, _waiting(queue), _in_flight(queue),
        format_age(queue.oldest_age_s) if queue.oldest_age_s is not None else "-",
        f"{queue.arrival_per_s:.1f}", f"{queue.completed_per_s:.1f}",
        format_age(queue.lag_mean_s) if queue.lag_mean_s is not None else "-",
        f"{queue.judge.latency_s:.2f}s" if queue.judge else "-",
        (f"{queue.judge.cached_share:.0%}" if queue.judge and queue.judge.cached_share
         is not None else "-"),
        f"{failed:.1%}" if queue.failures else "0",
        "-" if advice.workers is None else f"{advice.workers}{mark}",
        "-" if advice.drain_workers is None else f"{advice.drain_workers}{mark}",
    ]


def _waiting(queue: QueueStatus) -> str:
    reading = queue.reading
    if reading.waiting_jobs is not None:
        return f"{'' if reading.waiting_exact else '~'}{reading.waiting_jobs:,}"
    if reading.waiting_messages is not None:
        return f"{reading.waiting_messages:,} msgs"
    return "?"


def _in_flight(queue: QueueStatus) -> str:
    reading = queue.reading
    if reading.in_flight_jobs is None:
        return "?"
    later = f" ({reading.scheduled_jobs:,} later)" if reading.scheduled_jobs else ""
    return f"{reading.in_flight_jobs:,}{later}"


def _notes(queue: QueueStatus) -> list[str]:
    notes = []
    if queue.failures:
        parts = [f"{f.error_class}{' (dead letter)' if f.outcome == 'dead_letter' else ''} "
                 f"{f.count} ({f.share:.1%})" for f in queue.failures]
        notes.append(f"{queue.queue}: failures {', '.join(parts)}")
    if queue.reading.note:
        notes.append(f"{queue.queue}: {queue.reading.note}")
    advice = queue.recommendation
    if queue.judge and queue.judge.basis not in ("window", "recent"):
        notes.append(f"{queue.queue}: no verdicts of its own yet, judge figures from "
                     f"{queue.judge.basis}")
    if advice.reason:
        notes.append(f"{queue.queue}: {advice.reason}")
    if advice.rate_limited and advice.cap_calls_in_flight is not None:
        notes.append(f"{queue.queue}: * capped by {queue.judge_model}'s rate limit "
                     f"(at most {advice.cap_calls_in_flight:.0f} calls in flight)")
    if not queue.arrival_basis.startswith("completions +"):
        notes.append(f"{queue.queue}: arrivals = {queue.arrival_basis}")
    if queue.endpoints:
        from evalfleet.ops.fleet_status import endpoint_text

        notes.append(f"{queue.queue}: cascade "
                     f"{'; '.join(endpoint_text(tier) for tier in queue.endpoints)}")
    return notes


def _identity_notes(fleet: FleetStatus) -> list[str]:
    from evalfleet.ops.fleet_status import identity_changes

    notes = []
    for model, identities in identity_changes(fleet.identities).items():
        seen = "; then ".join(
            f"{identity.reported_model or '?'} (fingerprint {identity.fingerprint or '-'}, "
            f"{identity.verdicts:,} verdicts, {format_moment(identity.first_at)} to "
            f"{format_moment(identity.last_at)})" for identity in identities)
        notes.append(f"judge {model} changed what it reports about itself: {seen}")
    return notes
