"""A dataset's items out: JSONL, CSV, a gold file and the OpenAI chat fine-tuning format.

Every format writes the sample text verbatim (markup, template syntax and JSON inside
it stay as they were: the file is data, whoever shows it escapes it), with the
settings' secrets masked in every string.

- JSONL: one item per line, as :meth:`DatasetItem.as_json` gives it, plus ``labels``:
  people's labels made one per score (majority, lower median or mean, see
  :mod:`evalfleet.core.labels`), on the judge's scale.
- CSV: one row per item, :data:`CSV_COLUMNS`; nested values (context, fields,
  attributes, scores, labels, reviews) are JSON text in their cell, so a row reads back
  into the JSONL item (:func:`csv_row_to_json`).
- Gold: the file ``evalfleet calibrate`` reads (items with labels only).
- Fine-tuning: ``{"messages": [...]}`` per item, the judge's prompt rendered by the
  worker's renderer for the item's metric, then the verdict as the assistant's answer,
  people's scores in place of the judge's where they labelled (:mod:`.target`).
- Agent fine-tuning: ``{"messages": [...], "tools": [...]}`` per agent run, the run's
  own conversation with its tool calls and their results (:mod:`.conversation`).
- Conversation fine-tuning: the same per conversation, turn after turn
  (:mod:`.session_chat`).

A conversation's turns travel in the sample (JSONL, gold) and in the CSV's ``session``
column.
"""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from evalfleet.core.errors import InvalidSample, UnknownMetric
from evalfleet.core.labels import combine_labels
from evalfleet.core.log import scrub
from evalfleet.core.metric import Metric, MetricRegistry
from evalfleet.core.sample import Sample, parse_sample
from evalfleet.core.scales import score_scales
from evalfleet.core.session import Session
from evalfleet.core.trajectory import Trajectory
from evalfleet.dataset.conversation import Unconvertible, chat_conversation
from evalfleet.dataset.session_chat import session_chat
from evalfleet.dataset.target import verdict_text
from evalfleet.store.queries.datasets import DatasetItem
from workers.renderer import render_messages

#: CSV columns, in order.
CSV_COLUMNS = (
    "sample_id", "metric", "status", "error_class", "input", "output", "context", "reference",
    "fields", "attributes", "scores", "raw_scores", "reason", "labels", "reviews",
    "verdict_key", "prompt_version", "judge_model", "sample_ts", "judged_at", "session",
)

#: CSV columns holding JSON text.
_JSON_COLUMNS = frozenset({"context", "fields", "attributes", "scores", "raw_scores",
                           "labels", "reviews", "session"})

#: Text columns where an empty cell is an empty string (elsewhere it is null).
_PLAIN_TEXT_COLUMNS = frozenset({"input", "output"})

#: Sample parts taken out of ``sample`` into columns of their own.
_SAMPLE_COLUMNS = ("input", "output", "context", "reference", "fields")

#: Sample parts a sample may not have: a column of their own, null when absent, and
#: absent again when read back.
_OPTIONAL_SAMPLE_COLUMNS = ("session",)

#: Called with an item left out of an export and why.
Skipped = Callable[[DatasetItem, str], None]


def _ignore(item: DatasetItem, why: str) -> None:
    """Skipped items go unreported."""


def combined_labels(item: DatasetItem, *, registry: MetricRegistry) -> dict[str, Any]:
    """People's labels of an item, one value per score on the judge's scale (scores with
    only "cannot say", or a binary tie, left out; an unknown metric gives none)."""
    try:
        scales = score_scales(registry.get(item.metric))
    except UnknownMetric:
        return {}
    given: dict[str, list[Any]] = defaultdict(list)
    for review in item.reviews:
        given[review["score"]].append(review["value"])
    combined = {score: combine_labels(values, scale=scales[score])
                for score, values in sorted(given.items()) if score in scales}
    return {score: value for score, value in combined.items() if value is not None}


def jsonl_records(items: Iterable[DatasetItem], *, registry: MetricRegistry,
                  secrets: Sequence[str]) -> Iterator[dict[str, Any]]:
    """The JSONL export's records."""
    for item in items:
        yield masked({**item.as_json(), "labels": combined_labels(item, registry=registry)},
                     secrets)


def csv_rows(records: Iterable[Mapping[str, Any]]) -> Iterator[str]:
    """The CSV export's lines (header first) from JSONL records."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for record in records:
        sample = record.get("sample") or {}
        row = {column: record.get(column) for column in CSV_COLUMNS}
        row.update({part: sample.get(part)
                    for part in (*_SAMPLE_COLUMNS, *_OPTIONAL_SAMPLE_COLUMNS)})
        writer.writerow({column: _cell(column, value) for column, value in row.items()})
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
    yield buffer.getvalue()


def csv_row_to_json(row: Mapping[str, str]) -> dict[str, Any]:
    """A CSV row read back into the JSONL record it was written from.

    Raises:
        ValueError: A JSON column that does not hold JSON.
    """
    record: dict[str, Any] = {}
    for column in CSV_COLUMNS:
        text = row[column]
        if column in _JSON_COLUMNS:
            record[column] = json.loads(text)
        else:
            record[column] = text if text or column in _PLAIN_TEXT_COLUMNS else None
    sample = {part: record.pop(part) for part in _SAMPLE_COLUMNS}
    sample.update({part: value for part in _OPTIONAL_SAMPLE_COLUMNS
                   if (value := record.pop(part)) is not None})
    # A kept sample always has its context and fields (JSON, never null).
    kept = sample["context"] is not None or sample["fields"] is not None
    record["sample"] = sample if kept else None
    return record


def gold_records(items: Iterable[DatasetItem], *, registry: MetricRegistry, metric: str,
                 secrets: Sequence[str], skipped: Skipped = _ignore,
                 ) -> Iterator[dict[str, Any]]:
    """A gold file's records for ``metric``: each item of it with people's labels and a
    kept sample, as ``evalfleet calibrate`` reads them."""
    for item in items:
        if item.metric != metric:
            continue
        labels = combined_labels(item, registry=registry)
        if not labels:
            skipped(item, "no labels from people")
            continue
        if item.sample is None:
            skipped(item, "its sample was not kept")
            continue
        sample = {part: value for part, value in item.sample.items() if value is not None}
        yield masked({"id": item.sample_id, **sample, "attributes": item.attributes,
                      "labels": labels}, secrets)


def finetune_records(items: Iterable[DatasetItem], *, registry: MetricRegistry,
                     secrets: Sequence[str], skipped: Skipped = _ignore,
                     ) -> Iterator[dict[str, Any]]:
    """OpenAI chat fine-tuning lines for the judge: the rendered prompt, then the verdict
    (people's scores where they labelled) as the assistant's message.

    Left out, through ``skipped``: items of a metric not loaded here, without a kept
    sample, whose prompt does not render, or with no score to teach (a failed verdict
    nobody labelled).
    """
    for item in items:
        try:
            metric = registry.get(item.metric)
        except UnknownMetric:
            skipped(item, f"metric {item.metric!r} is not loaded here")
            continue
        messages = _prompt(item, metric=metric, skipped=skipped)
        if messages is None:
            continue
        target = verdict_text(item, metric=metric,
                              labels=combined_labels(item, registry=registry))
        if target is None:
            skipped(item, "no score to teach (a failed verdict nobody labelled)")
            continue
        yield masked({"messages": [*messages, {"role": "assistant", "content": target}]},
                     secrets)


def agent_chat_records(items: Iterable[DatasetItem], *, secrets: Sequence[str],
                       skipped: Skipped = _ignore) -> Iterator[dict[str, Any]]:
    """OpenAI chat fine-tuning lines for the agent: each run's conversation with its tool
    calls, tool results and final answer, and the tools it was offered. A run saved for
    several metrics is written once.

    Left out, through ``skipped``: items without a kept sample or without a trajectory,
    and runs that do not read or cannot be written as a conversation (a tool call with
    no result, no answer at the end).
    """
    def convert(data: Any, sample: dict[str, Any]) -> dict[str, Any]:
        return chat_conversation(Trajectory.model_validate(data), question=sample.get("input"))

    return _chat_records(items, part="trajectory", absent="not an agent's run",
                         convert=convert, secrets=secrets, skipped=skipped)


def session_chat_records(items: Iterable[DatasetItem], *, secrets: Sequence[str],
                         skipped: Skipped = _ignore) -> Iterator[dict[str, Any]]:
    """OpenAI chat fine-tuning lines for a conversational app: each conversation's turns
    as user and assistant messages, with each turn's tool calls and results
    (:mod:`.session_chat`). A version saved for several metrics is written once; each
    version of a conversation saved is a line of its own.

    Left out, through ``skipped``: items without a kept sample or without a session, and
    sessions that do not read or have no turn with a question and an answer.
    """
    return _chat_records(items, part="session", absent="not a conversation",
                         convert=lambda data, _: session_chat(Session.model_validate(data)),
                         secrets=secrets, skipped=skipped)


def _chat_records(items: Iterable[DatasetItem], *, part: str, absent: str,
                  convert: Callable[[Any, dict[str, Any]], dict[str, Any]],
                  secrets: Sequence[str], skipped: Skipped) -> Iterator[dict[str, Any]]:
    """One chat line per sample id, from its sample's ``part`` by ``convert``."""
    written: set[str] = set()
    for item in items:
        if item.sample_id in written:
            continue
        data = (item.sample or {}).get(part)
        if data is None:
            skipped(item, "its sample was not kept" if item.sample is None
                    else f"{absent} (no {part})")
            continue
        try:
            record = convert(data, item.sample or {})
        except ValidationError as exc:
            skipped(item, f"its {part} does not read ({exc.error_count()} error(s))")
            continue
        except Unconvertible as exc:
            skipped(item, str(exc))
            continue
        written.add(item.sample_id)
        yield masked(record, secrets)


def item_sample(item: DatasetItem) -> Sample:
    """The sample an item's verdict judged, as the worker had it.

    Raises:
        InvalidSample: The item has no kept sample, or it no longer validates.
    """
    if item.sample is None:
        raise InvalidSample("its sample was not kept", sample_id=item.sample_id,
                            field="sample")
    data = {part: value for part, value in item.sample.items() if value is not None}
    return parse_sample({"id": item.sample_id, "timestamp": item.sample_ts.isoformat(),
                         **data, "attributes": item.attributes}, record="dataset item")


def _prompt(item: DatasetItem, *, metric: Metric,
            skipped: Skipped) -> list[dict[str, str]] | None:
    try:
        rendered = render_messages(metric, item_sample(item))
    except InvalidSample as exc:
        skipped(item, f"the prompt does not render: {exc.reason}")
        return None
    return [{"role": message["role"], "content": message["content"]} for message in rendered]


def masked(value: Any, secrets: Sequence[str]) -> Any:
    """``value`` with the secrets masked in every string it holds."""
    if not secrets:
        return value
    if isinstance(value, str):
        return scrub(value, secrets)
    if isinstance(value, dict):
        return {key: masked(inner, secrets) for key, inner in value.items()}
    if isinstance(value, list):
        return [masked(inner, secrets) for inner in value]
    return value


def _cell(column: str, value: Any) -> str:
    if column in _JSON_COLUMNS:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return "" if value is None else str(value)
