"""``evalfleet dataset``: samples saved from production as versioned datasets."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import click

from evalfleet.cli.alerts import render_table
from evalfleet.cli.context import CliState, open_existing_store, parse_time, pass_state
from evalfleet.core.durations import format_moment
from evalfleet.core.errors import EvalfleetError, InvalidDataset

if TYPE_CHECKING:
    from evalfleet.store.queries.datasets import DatasetItem, Datasets, DatasetVersion

#: The formats ``dataset export`` writes (:mod:`evalfleet.dataset.export`).
EXPORT_FORMATS = ("jsonl", "csv", "gold", "openai", "openai-agent", "openai-session")

#: Longest text shown per cell by ``dataset show``, in characters.
SHOW_CHARS = 60

#: The selection options that filter (``--alert`` takes none of them).
_FILTERS = ("metric", "segments", "score", "since", "until", "status", "labelled",
            "disagreement", "sample_ids", "ids_file")

_version_option = click.option("--version", type=click.IntRange(min=1), default=None,
                               help="This version [default: the latest].")


@click.group()
def dataset() -> None:
    """Datasets from production: the samples of a filter, a list of ids or an alert's
    worst samples, copied as judged (sample, the judge's scores and reasoning, people's
    labels) so retention never empties them; versioned, exported as JSONL, CSV, a gold
    file for `evalfleet calibrate` or OpenAI chat fine-tuning lines for the judge."""


def _selection_options(command: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--metric", default=None, help="Only verdicts of this metric."),
        click.option("--segment", "segments", multiple=True, metavar="KEY=VALUE",
                     help="Only verdicts whose attributes hold KEY=VALUE (repeatable)."),
        click.option("--score", default=None,
                     help="With --min/--max: the normalised score to filter on."),
        click.option("--min", "low", type=float, default=0.0, show_default=True),
        click.option("--max", "high", type=float, default=1.0, show_default=True),
        click.option("--since", default=None,
                     help="Sample time at or after: ISO 8601 time or 2h/7d ago."),
        click.option("--until", default=None, help="Sample time before: ISO 8601 or 2h ago."),
        click.option("--status", type=click.Choice(["ok", "failed"]), default=None,
                     help="Only verdicts with this judge status."),
        click.option("--labelled", is_flag=True,
                     help="Only samples people labelled in the review queue."),
        click.option("--disagree", "disagreement", type=click.FloatRange(0, 1, min_open=True),
                     default=None, metavar="D",
                     help="Only samples where a reviewer's label is at least D from the "
                          "judge's score (0..1): the review queue's disagreements."),
        click.option("--id", "sample_ids", multiple=True, help="A sample id (repeatable)."),
        click.option("--ids-file", type=click.Path(exists=True, dir_okay=False,
                                                   path_type=Path),
                     help="A file of sample ids, one a line."),
        click.option("--alert", "alert", default=None, metavar="RULE[:SEGMENT]",
                     help="The worst samples of an alert's window, as its page shows them "
                          "(SEGMENT as `alerts list` prints it; default: its most telling)."),
        click.option("--worst", type=click.IntRange(1, 1000), default=10, show_default=True,
                     help="With --alert: how many of the worst samples."),
        click.option("--limit", type=click.IntRange(1, 100_000), default=1000,
                     show_default=True, help="At most this many verdicts, oldest first."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@contextmanager
def open_datasets(state: CliState) -> Iterator[Datasets]:
    """The store's datasets; dataset errors become usage errors naming the field."""
    from evalfleet.store.queries.datasets import Datasets

    store = open_existing_store(state.settings.resolved_database_url(), pool_size=1)
    try:
        yield Datasets(store)
    except InvalidDataset as exc:
        raise click.UsageError(str(exc)) from None
    finally:
        store.close()


def _chosen(state: CliState, sets: Datasets, options: dict[str, Any]) -> tuple[
        list[DatasetItem], str]:
    """The items the selection options pick, and a note saying how."""
    from evalfleet.dataset.selection import check_sample_id, parse_labels, read_sample_ids
    from evalfleet.store.queries.datasets import Selection

    if options["alert"]:
        mixed = [name for name in _FILTERS if options[name] not in (None, (), False)]
        if mixed:
            raise InvalidDataset(f"takes no other filter (--{mixed[0].replace('_', '-')})",
                                 field="alert")
        return _alert_items(state, sets, options["alert"], worst=options["worst"])
    ids = [check_sample_id(text, where="--id: ") for text in options["sample_ids"]]
    if options["ids_file"] is not None:
        with options["ids_file"].open("rb") as lines:
            ids += read_sample_ids(lines, source=options["ids_file"].name)
    try:
        since, until = parse_time(options["since"]), parse_time(options["until"])
    except ValueError as exc:
        raise InvalidDataset(str(exc), field="since/until") from None
    score = options["score"]
    if not score and (options["low"], options["high"]) != (0.0, 1.0):
        raise InvalidDataset("--min and --max need --score NAME", field="score")
    selection = Selection(
        metric=options["metric"], sample_ids=ids or None,
        segment=parse_labels(options["segments"]), score=score,
        score_range=(options["low"], options["high"]) if score else None, since=since,
        until=until, status=options["status"], labelled=options["labelled"],
        disagreement=options["disagreement"], limit=options["limit"])
    return sets.select(selection), _note(options, ids=len(ids))


def _note(options: dict[str, Any], *, ids: int) -> str:
    parts = [f"metric={options['metric']}"] if options["metric"] else []
    parts += list(options["segments"])
    if options["score"]:
        parts.append(f"{options['low']:g}<={options['score']}<={options['high']:g}")
    parts += [f"{name}={options[name]}" for name in ("since", "until", "status")
              if options[name]]
    if options["labelled"]:
        parts.append("labelled")
    if options["disagreement"] is not None:
        parts.append(f"disagree>={options['disagreement']:g}")
    if ids:
        parts.append(f"{ids} id(s)")
    return "filter " + (" ".join(parts) or "(all production verdicts)")


def _alert_items(state: CliState, sets: Datasets, text: str, *,
                 worst: int) -> tuple[list[DatasetItem], str]:
    from evalfleet.alerts import load_rule_set
    from evalfleet.alerts.ledger import load_states
    from evalfleet.alerts.terminal import most_telling
    from evalfleet.dataset.selection import alert_samples, rule_segment

    name, _, segment_text = text.partition(":")
    try:
        rules = load_rule_set(state.settings)
    except EvalfleetError as exc:
        raise click.UsageError(str(exc)) from None
    rule = next((r for r in rules.rules if r.name == name), None)
    if rule is None:
        raise InvalidDataset(f"no rule {name!r}", field="alert")
    if segment_text:
        segment = rule_segment(segment_text, rule)
    else:
        with sets.store.connect() as conn:
            segment = most_telling(load_states(conn, rule.name))
    found = alert_samples(sets.store, rule, segment, worst=worst)
    return sets.of_verdicts(found.found), found.note


def _describe(version: DatasetVersion | None, *, what: str) -> None:
    if version is None:
        click.echo(f"nothing {what}: no new version")
        return
    click.echo(f"{version.dataset} version {version.version}: {version.items} item(s)")


@dataset.command("create")
@click.argument("name")
@_selection_options
@click.option("--description", default=None, help="What the dataset is for.")
@click.option("--retention-days", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Keep it this many days after its last version "
                   "[default: EVALFLEET_DATASET_RETENTION_DAYS].")
@pass_state
def create_command(state: CliState, name: str, description: str | None,
                   retention_days: float | None, **options: Any) -> None:
    """Create dataset NAME (version 1) from a filter, a list of sample ids or an alert's
    worst samples; only production verdicts are taken."""
    with open_datasets(state) as sets:
        items, note = _chosen(state, sets, options)
        version = sets.create(name, items, note=note, now=datetime.now(UTC),
                              description=description, retention_days=retention_days)
    _describe(version, what="created")


@dataset.command("add")
@click.argument("name")
@_selection_options
@pass_state
def add_command(state: CliState, name: str, **options: Any) -> None:
    """Add the samples a filter, ids or an alert pick to NAME as a new version (those in
    it already stay as they were copied)."""
    with open_datasets(state) as sets:
        items, note = _chosen(state, sets, options)
        version = sets.add(name, items, note="add " + note, now=datetime.now(UTC))
    _describe(version, what="added")


@dataset.command("remove")
@click.argument("name")
@click.option("--id", "sample_ids", multiple=True, help="A sample id (repeatable).")
@click.option("--verdict-key", "verdict_keys", multiple=True,
              help="A verdict key digest, as the export names it (repeatable).")
@pass_state
def remove_command(state: CliState, name: str, sample_ids: tuple[str, ...],
                   verdict_keys: tuple[str, ...]) -> None:
    """Make a new version of NAME without these samples (earlier versions keep them)."""
    if not sample_ids and not verdict_keys:
        raise click.UsageError("give --id or --verdict-key")
    with open_datasets(state) as sets:
        version = sets.remove(name, sample_ids=sample_ids, verdict_keys=verdict_keys,
                              note=f"remove {len(sample_ids) + len(verdict_keys)} given",
                              now=datetime.now(UTC))
    _describe(version, what="removed")


@dataset.command("list")
@pass_state
def list_command(state: CliState) -> None:
    """Every dataset with its latest version."""
    from evalfleet.alerts.evidence import plain_text

    with open_datasets(state) as sets:
        infos = sets.catalog()
    rows = [[info.name, str(info.latest.version), str(info.latest.items),
             format_moment(info.latest.created_at),
             "-" if info.retention_days is None else f"{info.retention_days:g}d",
             plain_text(info.description, limit=SHOW_CHARS) or "-"] for info in infos]
    click.echo(render_table(["name", "version", "items", "last version", "retention",
                             "description"], rows))


@dataset.command("show")
@click.argument("name")
@_version_option
@pass_state
def show_command(state: CliState, name: str, version: int | None) -> None:
    """The versions of NAME and the items of one, sample text cut and cleaned for the
    terminal, secrets masked."""
    from evalfleet.alerts.evidence import plain_text
    from evalfleet.core.log import scrub

    secrets = state.settings.secret_values()

    def shown(text: str, limit: int) -> str:
        return plain_text(scrub(text[: limit * 4], secrets), limit=limit)

    with open_datasets(state) as sets:
        versions = sets.versions(name)
        items = list(sets.items(name, version=version))
    click.echo(render_table(["version", "items", "created", "made by"], [
        [str(v.version), str(v.items), format_moment(v.created_at),
         shown(v.note, SHOW_CHARS * 2)] for v in versions]))
    click.echo("")
    rows = []
    for item in items:
        sample = item.sample or {}
        scores = " ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in item.scores.items())
        rows.append([shown(item.sample_id, 40), item.metric, item.status, scores,
                     str(len(item.reviews)), shown(str(sample.get("input") or ""), SHOW_CHARS)])
    click.echo(render_table(["sample", "metric", "status", "judge scores", "labels",
                             "question"], rows))


@dataset.command("export")
@click.argument("name")
@_version_option
@click.option("--format", "fmt", type=click.Choice(EXPORT_FORMATS),
              default="jsonl", show_default=True,
              help="jsonl, csv, gold (the file `evalfleet calibrate` reads; needs --metric) "
                   "openai (chat fine-tuning lines for the judge), openai-agent (each "
                   "agent run's own conversation with its tool calls, for fine-tuning the "
                   "agent) or openai-session (each conversation's turns, for fine-tuning "
                   "a conversational app).")
@click.option("--metric", default=None, help="Only items of this metric.")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write here instead of stdout.")
@pass_state
def export_command(state: CliState, name: str, version: int | None, fmt: str,
                   metric: str | None, output: Path | None) -> None:
    """Write a version of NAME (default: the latest) as JSONL, CSV, a gold file or OpenAI
    chat fine-tuning lines (for the judge, or an agent's runs with their tool calls).
    Items a format cannot hold are named on stderr."""
    if fmt == "gold" and metric is None:
        raise click.UsageError("--format gold needs --metric")
    with open_datasets(state) as sets:
        items = [item for item in sets.items(name, version=version)
                 if metric is None or item.metric == metric]
    target = output.open("w", encoding="utf-8", newline="") if output else sys.stdout
    try:
        written = write_export(items, fmt=fmt, metric=metric, state=state, out=target)
    finally:
        if output:
            target.close()
    click.echo(f"{written} item(s) written" + (f" to {output}" if output else ""), err=True)


def write_export(items: list[DatasetItem], *, fmt: str, metric: str | None,
                 state: CliState, out: TextIO) -> int:
    """Write ``items`` in ``fmt`` to ``out``; items left out are named on stderr.

    Returns:
        How many items were written.
    """
    from evalfleet.core.metric import load_registry
    from evalfleet.dataset import (
        agent_chat_records,
        csv_rows,
        finetune_records,
        gold_records,
        jsonl_records,
        session_chat_records,
    )

    registry = load_registry(state.settings.judge.metrics_dir)
    secrets = state.settings.secret_values()

    def skipped(item: DatasetItem, why: str) -> None:
        click.echo(f"left out {item.sample_id!r} ({item.metric}): {why}", err=True)

    if fmt == "csv":
        for line in csv_rows(jsonl_records(items, registry=registry, secrets=secrets)):
            out.write(line)
        return len(items)
    if fmt == "gold":
        assert metric is not None
        records = gold_records(items, registry=registry, metric=metric, secrets=secrets,
                               skipped=skipped)
    elif fmt == "openai":
        records = finetune_records(items, registry=registry, secrets=secrets,
                                   skipped=skipped)
    elif fmt == "openai-agent":
        records = agent_chat_records(items, secrets=secrets, skipped=skipped)
    elif fmt == "openai-session":
        records = session_chat_records(items, secrets=secrets, skipped=skipped)
    else:
        records = jsonl_records(items, registry=registry, secrets=secrets)
    written = 0
    for record in records:
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
        written += 1
    return written


@dataset.command("delete")
@click.argument("name")
@pass_state
def delete_command(state: CliState, name: str) -> None:
    """Delete NAME, its versions and its copies of samples."""
    with open_datasets(state) as sets:
        copies = sets.delete(name)
    click.echo(f"{name} deleted ({copies} item copies)")


@dataset.command("erase")
@click.option("--id", "sample_ids", multiple=True, required=True,
              help="A sample id (repeatable).")
@pass_state
def erase_command(state: CliState, sample_ids: tuple[str, ...]) -> None:
    """An erasure request: delete every copy of these samples from every dataset and
    every version (verdicts and their samples go by `evalfleet purge` and retention)."""
    from evalfleet.dataset.selection import check_sample_id

    with open_datasets(state) as sets:
        copies = sets.erase_samples([check_sample_id(s, where="--id: ") for s in sample_ids])
    click.echo(f"{copies} item copies deleted")
