"""Labels in and out: ``evalfleet review import`` and ``evalfleet review export``.

A label line is one JSON object per reviewer, sample, metric and score::

    {"sample_id": "req-8812", "metric": "bbh_match", "score": "correct",
     "value": true, "reviewer": "ann", "comment": "the answer is right"}

``score`` is a score name as in the metric file and ``value`` is on the judge's own
scale as the metric file declares it; null means "cannot say". The export writes the
same lines, so an export imports as it is. A line for a sample that is not queued
queues it (recorded as chosen, reason ``import``) from its production verdict.

A line may name its item instead (``item_id``, as ``evalfleet review pending`` lists
it; ``sample_id`` and ``metric`` may then be left out, and must match it when given):
the label goes to that item and keeps its reason and probability, so labels of the
random slice fetched by another tool count as random.

The gold export is a gold file as ``evalfleet calibrate`` reads it: each labelled item's
sample with ``labels``, several reviewers' labels made one (see
:mod:`evalfleet.core.labels`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from evalfleet.core.errors import InvalidSample, UnknownMetric
from evalfleet.core.labels import combine_labels
from evalfleet.core.metric import MetricRegistry
from evalfleet.core.scales import score_scales
from evalfleet.review.label import read_label
from evalfleet.store.queries.review_queue import ReviewItem, ReviewLabel, ReviewQueue

#: Keys of a label line; ``comment`` may be left out.
LABEL_KEYS = ("item_id", "sample_id", "metric", "score", "value", "reviewer", "comment")

#: Longest reviewer name and comment kept, in characters.
MAX_REVIEWER_CHARS = 128
MAX_COMMENT_CHARS = 10_000


@dataclass
class ImportReport:
    """What an import did."""

    imported: int = 0
    """Label lines stored."""
    queued: int = 0
    """Items queued for samples that were not in the queue."""
    errors: list[InvalidSample] = field(default_factory=list)
    """One per bad line, naming the line, the sample and the field."""


@dataclass(frozen=True)
class _Line:
    sample_id: str
    metric: str
    score: str
    value: Any
    reviewer: str
    comment: str | None
    item_id: int | None = None


def import_labels(lines: Iterable[bytes], *, queue: ReviewQueue, registry: MetricRegistry,
                  now: datetime, expire_s: float, source_name: str = "") -> ImportReport:
    """Store the labels of a JSONL file; a bad line is reported and the rest goes on.

    Args:
        lines: The file's lines.
        queue: The review queue to label in.
        registry: The metrics, for each score's scale.
        now: The time labels are stored at.
        expire_s: Expiry of the items this import queues.
        source_name: The file's name, for errors.

    Returns:
        What was imported, and the errors.
    """
    return import_records(
        ((f"{source_name}: line {number}" if source_name else f"line {number}", raw)
         for number, raw in enumerate(lines, 1)),
        queue=queue, registry=registry, now=now, expire_s=expire_s)


def import_records(records: Iterable[tuple[str, bytes | InvalidSample]], *,
                   queue: ReviewQueue, registry: MetricRegistry, now: datetime,
                   expire_s: float) -> ImportReport:
    """:func:`import_labels` over label lines each named for its errors (a line of a
    file, a result of a Label Studio task); an error in place of a line is reported.
    """
    report = _ImportItems(report=ImportReport())
    for record, raw in records:
        if isinstance(raw, InvalidSample):
            report.report.errors.append(raw)
            continue
        if not raw.strip():
            continue
        try:
            line = _read_line(raw, record=record)
            named = _named_item(queue, line, record=record)
            if named is not None:
                line = replace(line, sample_id=named.sample_id, metric=named.metric)
            metric = _metric(registry, line, record=record)
            label = read_label(line.value, metric=metric, score=line.score, record=record,
                               sample_id=line.sample_id, field="value")
            item = named or report.item_for(queue, line, now=now, expire_s=expire_s,
                                            record=record)
        except InvalidSample as exc:
            report.report.errors.append(exc)
            continue
        if queue.label(item_id=item.id, reviewer=line.reviewer, labels={line.score: label},
                       comment=line.comment, source="import", now=now,
                       require_lease=False) is None:
            report.report.errors.append(InvalidSample(
                f"the random item already has the {item.labels_wanted} label(s) it wants "
                "from other reviewers", record=record, sample_id=line.sample_id,
                field="reviewer"))
            continue
        report.report.imported += 1
    return report.report


@dataclass
class _ImportItems:
    """The import's items by sample and metric, found or queued once each."""

    report: ImportReport
    items: dict[tuple[str, str], ReviewItem] = field(default_factory=dict)

    def item_for(self, queue: ReviewQueue, line: _Line, *, now: datetime, expire_s: float,
                 record: str) -> ReviewItem:
        """The item a line labels, queued from its verdict when there is none.

        Raises:
            InvalidSample: The sample has no production verdict for the metric.
        """
        key = (line.sample_id, line.metric)
        if key not in self.items:
            item = queue.find_item(sample_id=line.sample_id, metric=line.metric)
            if item is None:
                item = queue.queue_verdict(sample_id=line.sample_id, metric=line.metric,
                                           reason="import", now=now, expire_s=expire_s)
                if item is None:
                    raise InvalidSample(f"no stored {line.metric} verdict for this sample",
                                        record=record, sample_id=line.sample_id,
                                        field="sample_id")
                self.report.queued += 1
            self.items[key] = item
        return self.items[key]


def _named_item(queue: ReviewQueue, line: _Line, *, record: str) -> ReviewItem | None:
    """The item a line names by ``item_id`` (None: it names none).

    Raises:
        InvalidSample: No such item, or a ``sample_id`` or ``metric`` that is not its.
    """
    if line.item_id is None:
        return None
    item = queue.item(line.item_id)
    if item is None:
        raise InvalidSample(f"no review item {line.item_id}", record=record,
                            sample_id=line.sample_id or None, field="item_id")
    for name, given, own in (("sample_id", line.sample_id, item.sample_id),
                             ("metric", line.metric, item.metric)):
        if given and given != own:
            raise InvalidSample(f"item {item.id} is {own!r}, not {given!r}", record=record,
                                sample_id=item.sample_id, field=name)
    return item


def _read_line(raw: bytes, *, record: str) -> _Line:
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise InvalidSample(f"not JSON: {exc}", record=record) from None
    if not isinstance(data, dict):
        raise InvalidSample("expected a JSON object", record=record)
    sample_id = data.get("sample_id")
    sample_id = sample_id if isinstance(sample_id, str) and sample_id else None

    def text(name: str, *, limit: int = 256, optional: bool = False) -> str | None:
        value = data.get(name)
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value.strip():
            raise InvalidSample("expected a non-empty string", record=record,
                                sample_id=sample_id, field=name)
        if len(value) > limit or "\x00" in value:
            raise InvalidSample(f"longer than {limit} characters or holds a NUL",
                                record=record, sample_id=sample_id, field=name)
        return value

    unknown = sorted(set(data) - set(LABEL_KEYS))
    if unknown:
        raise InvalidSample("unknown key", record=record, sample_id=sample_id, field=unknown[0])
    if "value" not in data:
        raise InvalidSample("missing (null means cannot say)", record=record,
                            sample_id=sample_id, field="value")
    item_id = data.get("item_id")
    if item_id is not None and (isinstance(item_id, bool) or not isinstance(item_id, int)
                                or not 0 < item_id < 2 ** 63):
        raise InvalidSample("expected a positive whole number", record=record,
                            sample_id=sample_id, field="item_id")
    named = item_id is not None
    return _Line(
        sample_id=text("sample_id", optional=named) or "",
        metric=text("metric", limit=64, optional=named) or "",
        score=str(text("score", limit=64)), value=data["value"],
        reviewer=str(text("reviewer", limit=MAX_REVIEWER_CHARS)),
        comment=text("comment", limit=MAX_COMMENT_CHARS, optional=True), item_id=item_id)


def _metric(registry: MetricRegistry, line: _Line, *, record: str) -> Any:
    try:
        return registry.get(line.metric)
    except UnknownMetric:
        raise InvalidSample(f"unknown metric {line.metric!r}", record=record,
                            sample_id=line.sample_id, field="metric") from None


def label_lines(labels: Iterable[ReviewLabel]) -> Iterator[dict[str, Any]]:
    """Label lines as ``evalfleet review import`` reads them (with the ``item_id`` they
    belong to), plus when and how each was given (``created_at``, ``source``)."""
    for label in labels:
        yield {"item_id": label.item_id, "sample_id": label.sample_id, "metric": label.metric,
               "score": label.score, "value": label.raw_value, "reviewer": label.reviewer,
               "comment": label.comment, "created_at": label.created_at.isoformat(),
               "source": label.source}


def gold_records(items: Iterable[ReviewItem], labels: Iterable[ReviewLabel], *,
                 registry: MetricRegistry,
                 skipped: Callable[[ReviewItem, str], None] = lambda item, why: None,
                 ) -> Iterator[dict[str, Any]]:
    """A gold file's records: each item with a kept sample and at least one label.

    Args:
        items: The items, of one metric.
        labels: Their labels (any order).
        registry: The metrics, for each score's scale.
        skipped: Called with each labelled item left out and why (no sample kept).

    Returns:
        The records, in the items' order.
    """
    by_item: dict[int, dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
    for label in labels:
        by_item[label.item_id][label.score].append(label.raw_value)
    for item in items:
        given = by_item.get(item.id)
        if not given:
            continue
        scales = score_scales(registry.get(item.metric))
        combined = {score: combine_labels(values, scale=scales[score])
                    for score, values in sorted(given.items()) if score in scales}
        combined = {score: value for score, value in combined.items() if value is not None}
        if not combined:
            continue
        if item.sample is None:
            skipped(item, "its sample was not kept")
            continue
        sample = {part: value for part, value in item.sample.items() if value is not None}
        yield {"id": item.sample_id, **sample, "attributes": item.attributes,
               "labels": combined}
