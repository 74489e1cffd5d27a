"""``evalfleet review``: reviewers, the review queue, and labels in and out."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from evalfleet.cli.alerts import render_table
from evalfleet.cli.context import CliState, open_existing_store, parse_time, pass_state
from evalfleet.core.durations import format_duration, format_moment
from evalfleet.core.estimator import LAM_MEANING, MIN_LABELS, MIN_STRATUM_LABELS
from evalfleet.review.estimate import LABEL_WINDOW

if TYPE_CHECKING:
    from evalfleet.store.queries.review_queue import ReviewQueue

#: How far back ``review status`` looks without ``--since``.
DEFAULT_STATUS_SPAN = timedelta(days=30)


@click.group()
def review() -> None:
    """People label what the judge judged: a random slice of each metric's verdicts
    (EVALFLEET_REVIEW_RATES) and items queued on demand, labelled in `evalfleet ui`'s
    review page or imported from another tool."""


def _queue(state: CliState) -> ReviewQueue:
    from evalfleet.store.queries.review_queue import ReviewQueue

    return ReviewQueue(open_existing_store(state.settings.resolved_database_url(), pool_size=1))


@review.command("add-reviewer")
@click.argument("name")
@pass_state
def add_reviewer(state: CliState, name: str) -> None:
    """Add reviewer NAME (or give them a new token) and print their token once; only its
    hash is kept. They open the review page with it."""
    if not name.strip() or len(name) > 128 or not name.isprintable():
        raise click.UsageError("NAME must be 1 to 128 printable characters")
    queue = _queue(state)
    try:
        token = queue.add_reviewer(name, now=datetime.now(UTC))
    finally:
        queue.store.close()
    click.echo(token)


@review.command("queue")
@click.option("--alert", "alert_rule", default=None, metavar="RULE",
              help="Queue the worst samples of this alert rule's window (its evidence).")
@click.option("--alert-segment", default=None, metavar="SEGMENT",
              help="With --alert: the segment as `alerts list` prints it (default: the most "
                   "specific firing one).")
@click.option("--metric", default=None, help="Only verdicts of this metric.")
@click.option("--id", "sample_ids", multiple=True, help="A sample id (repeatable).")
@click.option("--segment", "segments", multiple=True, metavar="KEY=VALUE",
              help="Only verdicts whose attributes hold KEY=VALUE (repeatable).")
@click.option("--score", default=None, help="With --min/--max: the normalised score to filter.")
@click.option("--min", "low", type=float, default=0.0, show_default=True)
@click.option("--max", "high", type=float, default=1.0, show_default=True)
@click.option("--since", default=None, help="Created at or after: ISO 8601 time or 2h/7d ago.")
@click.option("--until", default=None, help="Created before: ISO 8601 time or 2h/7d ago.")
@click.option("--labels", "labels_wanted", type=click.IntRange(1, 10), default=None,
              help="Labels each item asks for [default: EVALFLEET_REVIEW_LABELS_WANTED].")
@click.option("--limit", type=click.IntRange(1, 100_000), default=1000, show_default=True)
@pass_state
def queue_command(state: CliState, alert_rule: str | None, alert_segment: str | None,
                  metric: str | None, sample_ids: tuple[str, ...],
                  segments: tuple[str, ...], score: str | None, low: float, high: float,
                  since: str | None, until: str | None, labels_wanted: int | None,
                  limit: int) -> None:
    """Queue production verdicts for review on demand: an alert's evidence, a list of ids
    or a filter. They are recorded as chosen (not random) and kept out of agreement
    figures."""
    if alert_rule is not None:
        _queue_alert(state, alert_rule, alert_segment, labels_wanted=labels_wanted,
                     limit=min(limit, 50))
        return
    try:
        since_at, until_at = parse_time(since), parse_time(until)
        segment = dict(part.split("=", 1) for part in segments)
    except ValueError as exc:
        raise click.UsageError(f"{exc} (--segment takes KEY=VALUE)") from None
    settings = state.settings
    queue = _queue(state)
    try:
        new = queue.queue_chosen(
            reason="ids" if sample_ids else "filter",
            detail=_describe(metric, segment, score, low, high) or None,
            now=datetime.now(UTC), expire_s=settings.review.review_expire_days * 86400.0,
            labels_wanted=labels_wanted or settings.review.review_labels_wanted, metric=metric,
            sample_ids=list(sample_ids) or None, segment=segment or None, score=score,
            score_range=(low, high) if score else None, since=since_at, until=until_at,
            limit=limit)
    finally:
        queue.store.close()
    click.echo(f"{new} item(s) queued")


def _queue_alert(state: CliState, rule_name: str, segment_text: str | None, *,
                 labels_wanted: int | None, limit: int) -> None:
    from evalfleet.alerts.view import load_alert_view
    from evalfleet.cli.alerts import alert_target

    settings = state.settings
    queue = _queue(state)
    try:
        rule, segment = alert_target(state, queue.store, rule_name, segment_text)
        view = load_alert_view(queue.store, rule, segment, worst=limit)
        ids = [evidence.sample_id for evidence in view.worst]
        new = queue.queue_chosen(
            reason="alert", detail=f"{rule.name} {segment}"[:256], now=datetime.now(UTC),
            expire_s=settings.review.review_expire_days * 86400.0,
            labels_wanted=labels_wanted or settings.review.review_labels_wanted,
            metric=rule.spec.metric, sample_ids=ids) if ids else 0
    finally:
        queue.store.close()
    click.echo(f"{new} item(s) queued from {len(ids)} worst sample(s) of {rule.name} {segment}")


def _describe(metric: str | None, segment: dict[str, str], score: str | None, low: float,
              high: float) -> str:
    parts = [f"metric={metric}"] if metric else []
    parts += [f"{key}={value}" for key, value in sorted(segment.items())]
    if score:
        parts.append(f"{low:g}<={score}<={high:g}")
    return " ".join(parts)[:256]


@review.command("pending")
@click.option("--metric", default=None, help="Only this metric's items.")
@click.option("--limit", type=click.IntRange(1, 100_000), default=1000, show_default=True)
@click.option("--after", type=click.IntRange(0), default=0, show_default=True,
              help="Only items after this item id (the last id of the previous page).")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per line (what `review import` needs: item_id, scores).")
@click.option("--format", "output_format", type=click.Choice(["table", "label-studio"]),
              default="table", show_default=True,
              help="label-studio: a JSON list of tasks Label Studio imports.")
@click.option("--lease-to", "lease_to", default=None, metavar="NAME",
              help="Lease the items listed to NAME (your tool) so the review page does not "
                   "hand them out meanwhile.")
@click.option("--lease", "lease_for", default="8h", show_default=True,
              help="With --lease-to: how long (a duration).")
@pass_state
def pending_command(state: CliState, metric: str | None, limit: int, after: int,
                    as_json: bool, output_format: str, lease_to: str | None,
                    lease_for: str) -> None:
    """Items waiting for labels that nobody holds, in queue order, with their reason,
    inclusion probability and stratum: the slice for another labelling tool. Labels
    imported with the item's `item_id` keep them, so a random item's labels count as
    random. Without --lease-to this only reads; an item the page finishes meanwhile
    refuses one reviewer more."""
    from evalfleet.core.durations import parse_duration
    from evalfleet.core.metric import load_registry
    from evalfleet.review.pending import label_studio_task, pending_record

    if lease_to is not None and (not lease_to.strip() or len(lease_to) > 128):
        raise click.UsageError("--lease-to takes a name of 1 to 128 characters")
    try:
        lease_s = parse_duration(lease_for).total_seconds()
    except ValueError as exc:
        raise click.UsageError(f"--lease: {exc}") from None
    registry = load_registry(state.settings.judge.metrics_dir)
    queue = _queue(state)
    try:
        now = datetime.now(UTC)
        items = queue.take_many(reviewer=lease_to, now=now, lease_s=lease_s, limit=limit,
                                metric=metric) if lease_to else \
            queue.pending(now=now, metric=metric, limit=limit, after=after)
    finally:
        queue.store.close()
    scores = {name: list(registry.get(name).spec.scores) if name in registry.names() else []
              for name in {item.metric for item in items}}
    if output_format == "label-studio":
        click.echo(json.dumps([label_studio_task(item, scores=scores[item.metric])
                               for item in items], ensure_ascii=False, indent=1))
    elif as_json:
        for item in items:
            click.echo(json.dumps(pending_record(item, scores=scores[item.metric]),
                                  ensure_ascii=False))
    else:
        click.echo(render_table(
            ["item", "metric", "sample", "reason", "probability", "stratum", "labels",
             "expires"],
            [[str(i.id), i.metric, i.sample_id, i.reason,
              "-" if i.probability is None else f"{i.probability:g}", i.stratum or "-",
              f"{i.labels_given}/{i.labels_wanted}", format_moment(i.expires_at)]
             for i in items]))
        if lease_to:
            click.echo(f"{len(items)} item(s) leased to {lease_to} for {lease_for}")


@review.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--format", "input_format", type=click.Choice(["jsonl", "label-studio"]),
              default="jsonl", show_default=True,
              help="label-studio: a Label Studio JSON export of tasks from `review pending "
                   "--format label-studio` (each control named for a score).")
@pass_state
def import_command(state: CliState, file: Path, input_format: str) -> None:
    """Import labels from FILE (JSONL, one label a line: item_id, or sample_id and metric;
    score, value on the judge's scale or null for "cannot say", reviewer, optional
    comment). Bad lines are named on stderr and the rest is imported; exit status 1 when
    any line was bad."""
    from evalfleet.core.metric import load_registry
    from evalfleet.review.labelstudio import label_studio_lines
    from evalfleet.review.transfer import import_labels, import_records

    settings = state.settings
    registry = load_registry(settings.judge.metrics_dir)
    expire_s = settings.review.review_expire_days * 86400.0
    queue = _queue(state)
    try:
        if input_format == "label-studio":
            report = import_records(
                label_studio_lines(file.read_bytes(), source_name=file.name), queue=queue,
                registry=registry, now=datetime.now(UTC), expire_s=expire_s)
        else:
            with file.open("rb") as lines:
                report = import_labels(lines, queue=queue, registry=registry,
                                       now=datetime.now(UTC), expire_s=expire_s,
                                       source_name=file.name)
    finally:
        queue.store.close()
    for error in report.errors:
        click.echo(f"skipped: {error}", err=True)
    click.echo(f"{report.imported} label(s) imported, {report.queued} item(s) queued, "
               f"{len(report.errors)} line(s) skipped")
    if report.errors:
        sys.exit(1)


@review.command("export")
@click.option("--metric", default=None, help="Only this metric (required with --gold).")
@click.option("--gold", "gold", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write a gold file `evalfleet calibrate` reads to this path instead.")
@pass_state
def export_command(state: CliState, metric: str | None, gold: Path | None) -> None:
    """Write labels to stdout as JSONL (the lines `review import` reads), or with --gold a
    gold file of the labelled items (several reviewers' labels made one: majority,
    lower median or mean)."""
    from evalfleet.core.metric import load_registry
    from evalfleet.review.transfer import gold_records, label_lines

    if gold is not None and metric is None:
        raise click.UsageError("--gold needs --metric")
    queue = _queue(state)
    try:
        if gold is None:
            for line in label_lines(queue.iter_labels(metric=metric)):
                sys.stdout.write(json.dumps(line, ensure_ascii=False) + "\n")
            return
        registry = load_registry(state.settings.judge.metrics_dir)
        written = 0
        with gold.open("w", encoding="utf-8") as out:
            for record in gold_records(
                    queue.iter_items(metric=metric), queue.iter_labels(metric=metric),
                    registry=registry, skipped=lambda item, why: click.echo(
                        f"left out {item.sample_id}: {why}", err=True)):
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                written += 1
    finally:
        queue.store.close()
    click.echo(f"{written} gold item(s) written to {gold}", err=True)


@review.command("status")
@click.option("--since", default=None,
              help="Agreement over the random items queued since, the judge's and the "
                   "corrected means over the samples taken since (ISO 8601 time or 7d ago; "
                   "default: 30d, or the 30 days up to the newest sample when no verdict "
                   "is that recent).")
@click.option("--segment-by", "segment_by", default=None, metavar="KEY",
              help="Also agreement per value of this sample attribute, where a value has "
                   "enough labelled random items (20).")
@click.option("--json", "as_json", is_flag=True, help="Print the queue and agreement as JSON.")
@pass_state
def status_command(state: CliState, since: str | None, segment_by: str | None,
                   as_json: bool) -> None:
    """The review queue per metric (random and chosen items, labelled, partly labelled,
    skipped, open and expired, and random items with no label: non-response), and the
    judge's agreement with reviewers from the random items, weighted by their inclusion
    probabilities, with bootstrap 95% intervals; reviewer against reviewer where items
    have two labels; and per score the judge's mean since --since beside the mean
    corrected by those labels (as `review estimate` computes it)."""
    from dataclasses import asdict

    from evalfleet.core.live_agreement import live_agreement, segment_agreement
    from evalfleet.core.metric import load_registry
    from evalfleet.review.estimate import estimate_record, metric_estimates
    from evalfleet.store.queries.estimate import EstimateReads

    now = datetime.now(UTC)
    try:
        since_at = parse_time(since, now=now)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    queue = _queue(state)
    registry = load_registry(state.settings.judge.metrics_dir)
    try:
        reads = EstimateReads(queue.store)
        if since_at is None:
            since_at, now, note = default_period(reads.latest_sample_at(), now=now)
            if note and not as_json:
                click.echo(note)
        counts = queue.counts(now=datetime.now(UTC))
        agreement = live_agreement(queue.iter_items(), queue.iter_labels(),
                                   registry=registry, since=since_at)
        if segment_by:
            agreement += segment_agreement(queue.iter_items(), queue.iter_labels(),
                                           registry=registry, key=segment_by, since=since_at)
        estimates = [found for c in counts if c.metric in registry.names()
                     for found in metric_estimates(
                         reads, metric=registry.get(c.metric), start=since_at,
                         end=now, label_start=since_at) if found.verdicts]
    finally:
        queue.store.close()
    if as_json:
        click.echo(json.dumps({"queue": [asdict(c) for c in counts],
                               "agreement": [asdict(a) for a in agreement],
                               "estimates": [estimate_record(e) for e in estimates]},
                              indent=2))
        return
    rows = [[c.metric, str(c.random), str(c.chosen), str(c.labelled), str(c.partly_labelled),
             str(c.skipped), str(c.open), str(c.expired), str(c.random_unlabelled)]
            for c in counts]
    click.echo(render_table(["metric", "random", "chosen", "labelled", "partly", "skipped",
                             "open", "expired", "random unlabelled"], rows))
    if estimates:
        click.echo("\nwhat the judge says and what people would say (samples of "
                   f"{format_moment(since_at)} to {format_moment(now)})")
        click.echo(_estimates_table(estimates))
    if not agreement:
        click.echo("\nno labelled random items yet: no agreement figures")
        return
    click.echo("\nagreement with reviewers (random items queued since "
               f"{format_moment(since_at)}; 95% intervals)")
    click.echo(render_table(
        ["metric", "judge model", "score", "segment", "items", "statistics"],
        [[a.metric, a.judge_model, a.score, a.segment, str(a.items),
          "  ".join(f"{name} {_estimate(e)}" for name, e in a.statistics.items())]
         for a in agreement]))


def default_period(latest: datetime | None, *, now: datetime) -> tuple[
        datetime, datetime, str | None]:
    """The period ``review status`` reads without ``--since``: the last 30 days, or, when
    the newest sample is older than that (a demo's samples keep their dates), the 30
    days up to it, so the status shows the data there is in any month.

    Args:
        latest: The newest sample time in the store (None: no verdicts).
        now: The current time.

    Returns:
        The period's start and end, and a line saying why it moved (None when it did not).
    """
    start = now - DEFAULT_STATUS_SPAN
    if latest is None or latest >= start:
        return start, now, None
    # The window's end is exclusive: one second past the newest sample keeps it in.
    end = latest + timedelta(seconds=1)
    return end - DEFAULT_STATUS_SPAN, end, (
        f"no verdict sampled in the last {format_duration(DEFAULT_STATUS_SPAN)}: showing "
        f"the {format_duration(DEFAULT_STATUS_SPAN)} up to the newest sample, "
        f"{format_moment(latest)} (--since to choose)")


def _estimate(estimate: Any) -> str:
    if estimate.value is None:
        return "-"
    if estimate.low is None:
        return f"{estimate.value:.3f}"
    return f"{estimate.value:.3f} [{estimate.low:.3f}, {estimate.high:.3f}]"


@review.command("estimate")
@click.option("--metric", required=True, help="The metric.")
@click.option("--score", "scores", multiple=True,
              help="A score of the metric (repeatable; default: every score).")
@click.option("--segment", "segments", multiple=True, metavar="KEY=VALUE",
              help="Only verdicts (and review items) with this attribute (repeatable).")
@click.option("--since", default="6h", show_default=True,
              help="Window start on sample time (ISO 8601 time or 6h ago).")
@click.option("--until", default=None, help="Window end (ISO 8601 time or 1h ago; default now).")
@click.option("--label-window", default=format_duration(LABEL_WINDOW), show_default=True,
              help="How far back before the window's end labels correct it (a duration).")
@click.option("--min-labels", default=MIN_LABELS, show_default=True, type=click.IntRange(1),
              help="Fewest labelled random items for a corrected mean.")
@click.option("--min-stratum-labels", default=MIN_STRATUM_LABELS, show_default=True,
              type=click.IntRange(1),
              help="Fewest labelled random items in each stratum of the label pool.")
@click.option("--confidence", default=0.95, show_default=True,
              type=click.FloatRange(0.5, 0.999), help="Coverage of the intervals.")
@click.option("--json", "as_json", is_flag=True, help="Print the estimates as JSON.")
@pass_state
def estimate_command(state: CliState, metric: str, scores: tuple[str, ...],
                     segments: tuple[str, ...], since: str, until: str | None,
                     label_window: str, min_labels: int, min_stratum_labels: int,
                     confidence: float, as_json: bool) -> None:
    """What the judge says and what people would say: per score, the judge's mean over the
    window with its interval, and the mean corrected by the labels of the random review
    items (inverse-probability weighted, prediction-powered, pooled over --label-window),
    with the number of labels behind it."""
    from evalfleet.core.durations import parse_duration
    from evalfleet.core.errors import InvalidInput, UnknownMetric
    from evalfleet.core.metric import load_registry
    from evalfleet.review.estimate import estimate_record, metric_estimates
    from evalfleet.store.queries.estimate import EstimateReads

    try:
        segment = dict(part.split("=", 1) for part in segments)
    except ValueError:
        raise click.UsageError(f"--segment takes KEY=VALUE, not {segments}") from None
    try:
        now = datetime.now(UTC)
        end = parse_time(until, now=now) or now
        start = parse_time(since, now=end) or end
        label_start = end - parse_duration(label_window)
        found_metric = load_registry(state.settings.judge.metrics_dir).get(metric)
    except (ValueError, UnknownMetric) as exc:
        raise click.UsageError(str(exc)) from None
    queue = _queue(state)
    try:
        estimates = metric_estimates(
            EstimateReads(queue.store), metric=found_metric, scores=scores, segment=segment,
            start=start, end=end, label_start=label_start, min_labels=min_labels,
            min_stratum_labels=min_stratum_labels, confidence=confidence)
    except InvalidInput as exc:
        raise click.UsageError(str(exc)) from None
    finally:
        queue.store.close()
    if as_json:
        click.echo(json.dumps([estimate_record(e) for e in estimates], indent=2))
        return
    click.echo(_estimates_table(estimates))


def _estimates_table(estimates: list[Any]) -> str:
    from evalfleet.review.estimate import ASSUMPTION, estimate_text

    rows = []
    for e in estimates:
        raw, corrected = estimate_text(e)
        rows.append([e.metric, e.score, ",".join(f"{k}={v}" for k, v in e.segment.items())
                     or "(all)", str(e.verdicts), raw, corrected, str(e.labels),
                     "-" if e.lam is None else f"{e.lam:.2f}"])
    first = estimates[0]
    return "\n".join([
        render_table(["metric", "score", "segment", "verdicts", "judge mean", "corrected mean",
                      "labels", "lam"], rows),
        f"\nwindow {format_moment(first.start)} to {format_moment(first.end)} (sample time); "
        f"{first.pool.text()}; {first.confidence:.0%} intervals; "
        f"fewer than {first.min_labels} labels, or {first.min_stratum_labels} in a stratum: "
        "no corrected mean",
        f"the corrected mean {ASSUMPTION}",
        *([f"labels of a cascade: {first.cascade_labels}"] if first.cascade_labels else []),
        LAM_MEANING,
    ])
