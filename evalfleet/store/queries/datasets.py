"""Datasets in the store: samples saved from production as versioned copies.

A dataset is a name, its versions and its items. An item is a copy of one verdict as
judged (the sample, the judge's scores, raw scores and reasoning, people's labels from
the review queue), made the first time the verdict enters the dataset and never changed
after: so purging verdicts or their samples leaves every dataset whole, and a version
reads back item for item as it was made. Items name their verdict by key digest, never
by ``verdicts.id`` (the verdicts table may be partitioned).

Adding or removing items makes a new version listing all of its items in order
(``dataset_members``); earlier versions stay as they were. Deleting a dataset deletes its
copies; :meth:`Datasets.erase_samples` deletes a sample's copies from every dataset (an
erasure request), from every version that held them.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, exists, func, select, tuple_
from sqlalchemy.engine import Connection, RowMapping
from sqlalchemy.exc import IntegrityError

from evalfleet.core.errors import InvalidDataset
from evalfleet.store.queries.evidence import attributes_match
from evalfleet.store.schema import (
    dataset_items,
    dataset_members,
    dataset_versions,
    datasets,
    review_items,
    review_labels,
    verdict_samples,
    verdict_scores,
    verdicts,
)
from evalfleet.store.sql import SqlStore, _verdict_record, to_utc

#: A dataset's name: a letter or digit, then letters, digits, ``.``, ``_`` or ``-``.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

#: Longest version note and description kept, in characters.
MAX_NOTE_CHARS = 512
MAX_DESCRIPTION_CHARS = 1024

#: Most verdicts one selection copies.
MAX_SELECTION = 100_000

#: Rows per statement when copying items and members.
_CHUNK_ROWS = 1000


@dataclass(frozen=True)
class Selection:
    """Which production verdicts to copy: every condition given must hold."""

    metric: str | None = None
    sample_ids: Sequence[str] | None = None
    """Only these samples."""
    segment: Mapping[str, str] = field(default_factory=dict)
    """Attributes the verdict's must contain."""
    score: str | None = None
    """With ``score_range``: the normalised score to filter on (inclusive)."""
    score_range: tuple[float, float] | None = None
    since: datetime | None = None
    """Sample time at or after."""
    until: datetime | None = None
    """Sample time before."""
    status: str | None = None
    """``ok`` or ``failed``; None: both."""
    labelled: bool = False
    """Only samples people labelled in the review queue."""
    disagreement: float | None = None
    """Only samples where some reviewer's label is at least this far from the judge's
    score (both normalised to 0..1): the review queue's disagreements."""
    limit: int = 1000
    """At most this many verdicts, oldest sample first."""


@dataclass(frozen=True)
class DatasetItem:
    """One verdict as judged, copied into a dataset."""

    verdict_key: str
    """:meth:`VerdictKey.digest` of the verdict copied."""
    sample_id: str
    metric: str
    prompt_version: str
    judge_model: str
    status: str
    """``ok`` or ``failed``."""
    error_class: str | None
    scores: dict[str, float | None]
    """The judge's normalised scores."""
    raw_scores: dict[str, Any]
    """The judge's scores on its own scale."""
    reason: str | None
    """The judge's reasoning, verbatim (hostile text: escape where shown)."""
    attributes: dict[str, str]
    sample: dict[str, Any] | None
    """Input, output, context, reference and fields as judged; None when none was kept."""
    sample_ts: datetime
    judged_at: datetime
    """When the verdict was stored."""
    reviews: list[dict[str, Any]]
    """People's labels: ``{reviewer, score, value, comment}``, value on the judge's scale
    (None: cannot say)."""

    def as_json(self) -> dict[str, Any]:
        """The item as one JSON object (times in ISO 8601)."""
        return {
            "verdict_key": self.verdict_key, "sample_id": self.sample_id,
            "metric": self.metric, "prompt_version": self.prompt_version,
            "judge_model": self.judge_model, "status": self.status,
            "error_class": self.error_class, "scores": self.scores,
            "raw_scores": self.raw_scores, "reason": self.reason,
            "attributes": self.attributes, "sample": self.sample,
            "sample_ts": self.sample_ts.isoformat(), "judged_at": self.judged_at.isoformat(),
            "reviews": self.reviews,
        }


@dataclass(frozen=True, slots=True)
class DatasetVersion:
    """One version of a dataset."""

    dataset: str
    version: int
    created_at: datetime
    note: str
    """What made it (the filter, the alert, the ids added or removed)."""
    items: int


@dataclass(frozen=True, slots=True)
class DatasetInfo:
    """A dataset and its latest version."""

    name: str
    description: str | None
    retention_days: float | None
    """Its own retention; None: the setting's."""
    created_at: datetime
    latest: DatasetVersion


def check_name(name: str) -> str:
    """``name`` when it is a valid dataset name.

    Raises:
        InvalidDataset: Naming the field ``name``.
    """
    if not isinstance(name, str) or NAME_PATTERN.fullmatch(name) is None:
        raise InvalidDataset("1 to 128 letters, digits, '.', '_' or '-', starting with a "
                             "letter or digit", field="name")
    return name


class Datasets:
    """The datasets of one verdict store (Postgres or the embedded SQLite)."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store

    # --- choosing what to copy

    def select(self, selection: Selection) -> list[DatasetItem]:
        """Copies of the production verdicts ``selection`` picks, oldest sample first.

        Raises:
            InvalidDataset: A bad limit or score range.
        """
        _check_selection(selection)
        v = verdicts.c
        query = _verdict_query().where(v.purpose == "production")
        if selection.metric is not None:
            query = query.where(v.metric == selection.metric)
        if selection.status is not None:
            query = query.where(v.status == selection.status)
        if selection.since is not None:
            query = query.where(v.sample_ts >= to_utc(selection.since))
        if selection.until is not None:
            query = query.where(v.sample_ts < to_utc(selection.until))
        if selection.labelled:
            query = query.where(_labelled())
        if selection.disagreement is not None:
            query = query.where(_disagreeing(selection.disagreement))
        query = query.where(*attributes_match(selection.segment)).order_by(v.sample_ts, v.id)
        with self.store.connect() as conn:
            if selection.sample_ids is None:
                picked = self._first(conn, query, selection)
            else:
                # A few ids a statement (SQLite caps a statement's parameters), then
                # the chunks' rows in one order.
                ids = list(dict.fromkeys(selection.sample_ids))
                picked = sorted((row for start in range(0, len(ids), _CHUNK_ROWS)
                                 for row in self._first(conn, query.where(v.sample_id.in_(
                                     ids[start:start + _CHUNK_ROWS])), selection)),
                                key=lambda row: (to_utc(row["sample_ts"]), row["id"]))
            return _with_reviews(conn, picked[: selection.limit])

    @staticmethod
    def _first(conn: Connection, query: Any, selection: Selection) -> list[RowMapping]:
        """The first ``selection.limit`` rows of ``query`` within the score range."""
        picked: list[RowMapping] = []
        for row in conn.execute(query.execution_options(yield_per=_CHUNK_ROWS)).mappings():
            if _score_matches(row["scores"], selection.score, selection.score_range):
                picked.append(row)
                if len(picked) >= selection.limit:
                    break
        return picked

    def of_verdicts(self, found: Sequence[tuple[int, str]]) -> list[DatasetItem]:
        """Copies of the verdicts found by a read of the same store, in the order given
        (an alert's worst samples, from :func:`evalfleet.store.queries.evidence.lowest_scoring`).

        Args:
            found: ``(row id, sample id)`` of each verdict: the pair, not the row id alone,
                names a verdict (a partitioned table keeps ids unique per partition).
        """
        wanted = list(dict.fromkeys(found))
        with self.store.connect() as conn:
            rows = {(row["id"], row["sample_id"]): row for row in conn.execute(
                _verdict_query().where(tuple_(verdicts.c.id, verdicts.c.sample_id).in_(
                    wanted))).mappings()} if wanted else {}
            return _with_reviews(conn, [rows[pair] for pair in wanted if pair in rows])

    # --- writing

    def create(self, name: str, items: Sequence[DatasetItem], *, note: str, now: datetime,
               description: str | None = None,
               retention_days: float | None = None) -> DatasetVersion:
        """A new dataset whose version 1 holds ``items``.

        Raises:
            InvalidDataset: A bad name, description or retention, a name taken, no items.
        """
        check_name(name)
        if description is not None and (len(description) > MAX_DESCRIPTION_CHARS
                                        or "\x00" in description):
            raise InvalidDataset(f"longer than {MAX_DESCRIPTION_CHARS} characters or holds "
                                 "a NUL", field="description")
        if retention_days is not None and not retention_days > 0:
            raise InvalidDataset("must be a positive number of days", field="retention_days")
        if not items:
            raise InvalidDataset("no samples matched: nothing to save", field="items")
        taken = InvalidDataset(f"a dataset named {name!r} exists (add to it instead)",
                               field="name")
        try:
            with self.store.begin() as conn:
                if _dataset_id(conn, name) is not None:
                    raise taken
                dataset_id = conn.execute(datasets.insert().values(
                    name=name, description=description, retention_days=retention_days,
                    created_at=to_utc(now)).returning(datasets.c.id)).scalar_one()
                ids = _copy_items(conn, dataset_id, items, now=now)
                return _new_version(conn, dataset_id, name, ids, note=note, now=now)
        except IntegrityError:
            # Another writer created the same name between our check and our insert.
            raise taken from None

    def add(self, name: str, items: Sequence[DatasetItem], *, note: str,
            now: datetime) -> DatasetVersion | None:
        """A new version with ``items`` appended to the latest one's (those already in it
        are left where they are, as they were copied).

        Returns:
            The new version, or None when every item was in the latest version already.

        Raises:
            InvalidDataset: No such dataset.
        """
        with self.store.begin() as conn:
            dataset_id = _existing_id(conn, name, lock=True)
            current = _member_ids(conn, dataset_id, _latest(conn, dataset_id))
            copied = _copy_items(conn, dataset_id, items, now=now)
            held = set(current)
            added = [item_id for item_id in dict.fromkeys(copied) if item_id not in held]
            if not added:
                return None
            return _new_version(conn, dataset_id, name, [*current, *added], note=note, now=now)

    def remove(self, name: str, *, sample_ids: Iterable[str] = (),
               verdict_keys: Iterable[str] = (), note: str,
               now: datetime) -> DatasetVersion | None:
        """A new version without the items of these samples or verdict keys.

        Returns:
            The new version, or None when none of them was in the latest version.

        Raises:
            InvalidDataset: No such dataset.
        """
        samples, keys = set(sample_ids), set(verdict_keys)
        with self.store.begin() as conn:
            dataset_id = _existing_id(conn, name, lock=True)
            current = _member_ids(conn, dataset_id, _latest(conn, dataset_id))
            i = dataset_items.c
            dropped = {row[0] for row in conn.execute(
                select(i.id, i.sample_id, i.verdict_key).where(i.dataset_id == dataset_id))
                if row[1] in samples or row[2] in keys}
            kept = [item_id for item_id in current if item_id not in dropped]
            if len(kept) == len(current):
                return None
            return _new_version(conn, dataset_id, name, kept, note=note, now=now)

    def delete(self, name: str) -> int:
        """Delete a dataset, its versions and its copies.

        Returns:
            How many item copies were deleted.

        Raises:
            InvalidDataset: No such dataset.
        """
        with self.store.begin() as conn:
            dataset_id = _existing_id(conn, name)
            copies = _count_items(conn, dataset_items.c.dataset_id == dataset_id)
            _delete_datasets(conn, [dataset_id])
        return copies

    def erase_samples(self, sample_ids: Iterable[str]) -> int:
        """Delete every copy of these samples from every dataset and every version (an
        erasure request).

        Returns:
            How many item copies were deleted.
        """
        wanted = list(dict.fromkeys(sample_ids))
        total = 0
        with self.store.begin() as conn:
            for start in range(0, len(wanted), _CHUNK_ROWS):
                chunk = wanted[start:start + _CHUNK_ROWS]
                ids = list(conn.execute(select(dataset_items.c.id).where(
                    dataset_items.c.sample_id.in_(chunk))).scalars())
                total += _delete_items(conn, ids)
        return total

    def purge(self, *, now: datetime, default_days: float | None,
              dry_run: bool = False) -> list[str]:
        """Delete the datasets whose last version is older than their retention (their
        own, else ``default_days``; neither: kept).

        Args:
            dry_run: Only name them.

        Returns:
            The names deleted (or to delete).
        """
        d, ver = datasets.c, dataset_versions.c
        last = (select(ver.dataset_id, func.max(ver.created_at).label("last_at"))
                .group_by(ver.dataset_id).subquery())
        with self.store.begin() as conn:
            rows = conn.execute(select(d.id, d.name, d.retention_days, last.c.last_at)
                                .join(last, last.c.dataset_id == d.id)).all()
            expired = [(row[0], row[1]) for row in rows
                       if (days := row[2] if row[2] is not None else default_days) is not None
                       and to_utc(row[3]) < to_utc(now) - timedelta(days=days)]
            if not dry_run:
                _delete_datasets(conn, [dataset_id for dataset_id, _ in expired])
        return sorted(name for _, name in expired)

    # --- reading

    def catalog(self) -> list[DatasetInfo]:
        """Every dataset with its latest version, by name."""
        with self.store.connect() as conn:
            rows = conn.execute(select(datasets).order_by(datasets.c.name)).mappings().all()
            return [_info(conn, row) for row in rows]

    def info(self, name: str) -> DatasetInfo:
        """One dataset with its latest version.

        Raises:
            InvalidDataset: No such dataset.
        """
        with self.store.connect() as conn:
            row = conn.execute(select(datasets).where(
                datasets.c.name == check_name(name))).mappings().first()
            if row is None:
                raise _unknown(name)
            return _info(conn, row)

    def versions(self, name: str) -> list[DatasetVersion]:
        """Every version of a dataset, oldest first.

        Raises:
            InvalidDataset: No such dataset.
        """
        with self.store.connect() as conn:
            dataset_id = _existing_id(conn, name)
            return [_version(conn, dataset_id, name, number)
                    for number in conn.execute(
                        select(dataset_versions.c.version)
                        .where(dataset_versions.c.dataset_id == dataset_id)
                        .order_by(dataset_versions.c.version)).scalars()]

    def items(self, name: str, *, version: int | None = None) -> Iterator[DatasetItem]:
        """The items of a version (default: the latest), in order.

        Raises:
            InvalidDataset: No such dataset or version.
        """
        with self.store.connect() as conn:
            dataset_id = _existing_id(conn, name)
            number = _latest(conn, dataset_id) if version is None else version
            if conn.execute(select(dataset_versions.c.version).where(
                    dataset_versions.c.dataset_id == dataset_id,
                    dataset_versions.c.version == number)).first() is None:
                raise InvalidDataset(f"{name} has no version {number}", field="version")
            m, i = dataset_members.c, dataset_items.c
            query = (select(dataset_items).join(dataset_members, m.item_id == i.id)
                     .where(m.dataset_id == dataset_id, m.version == number)
                     .order_by(m.position))
            for row in conn.execution_options(yield_per=_CHUNK_ROWS).execute(query).mappings():
                yield _item(row)


def _check_selection(selection: Selection) -> None:
    if not 1 <= selection.limit <= MAX_SELECTION:
        raise InvalidDataset(f"must be 1 to {MAX_SELECTION:,}", field="limit")
    if selection.status not in (None, "ok", "failed"):
        raise InvalidDataset("must be ok or failed", field="status")
    if selection.disagreement is not None and not 0.0 < selection.disagreement <= 1.0:
        raise InvalidDataset("must be above 0 and at most 1 (normalised scores)",
                             field="disagreement")
    if selection.score_range is not None:
        low, high = selection.score_range
        if not 0.0 <= low <= high <= 1.0:
            raise InvalidDataset("must be 0 <= min <= max <= 1 (normalised scores)",
                                 field="score")
        if not selection.score:
            raise InvalidDataset("a score range needs the score's name", field="score")
    for key, value in selection.segment.items():
        if not key or "\x00" in key or "\x00" in value:
            raise InvalidDataset(f"bad segment label {key!r}", field="segment")


def _labelled() -> Any:
    """The verdict's sample and metric have a label in the review queue."""
    r, lab = review_items.c, review_labels.c
    return exists().where(r.sample_id == verdicts.c.sample_id, r.metric == verdicts.c.metric,
                          lab.item_id == r.id)


def _disagreeing(distance: float) -> Any:
    """Some reviewer's label of a score is at least ``distance`` from the judge's."""
    r, lab, vs = review_items.c, review_labels.c, verdict_scores.c
    return exists().where(
        r.sample_id == verdicts.c.sample_id, r.metric == verdicts.c.metric,
        lab.item_id == r.id, lab.value.is_not(None), vs.verdict_id == verdicts.c.id,
        vs.name == lab.score, vs.value.is_not(None), func.abs(lab.value - vs.value) >= distance)


def _verdict_query() -> Any:
    v = verdicts.c
    return (select(verdicts, verdict_samples.c.sample)
            .select_from(verdicts.outerjoin(verdict_samples,
                                            verdict_samples.c.verdict_id == v.id)))


def _score_matches(scores: Mapping[str, Any], score: str | None,
                   score_range: tuple[float, float] | None) -> bool:
    if score is None or score_range is None:
        return True
    value = (scores or {}).get(score)
    return isinstance(value, int | float) and score_range[0] <= value <= score_range[1]


def _with_reviews(conn: Connection, rows: Sequence[RowMapping]) -> list[DatasetItem]:
    """Items of verdict rows, with people's labels of their sample and metric."""
    reviews = _reviews(conn, {(row["sample_id"], row["metric"]) for row in rows})
    items = []
    for row in rows:
        record = _verdict_record(row)
        key = record.key
        items.append(DatasetItem(
            verdict_key=key.digest(), sample_id=key.sample_id, metric=key.metric,
            prompt_version=key.prompt_version, judge_model=key.judge_model,
            status=record.status, error_class=record.error_class, scores=record.scores,
            raw_scores=record.raw_scores, reason=record.reason,
            attributes=record.attributes, sample=record.sample, sample_ts=record.sample_ts,
            judged_at=record.created_at,
            reviews=reviews.get((key.sample_id, key.metric), [])))
    return items


def _reviews(conn: Connection,
             keys: set[tuple[str, str]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    found: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    ordered = sorted(keys)
    r, lab = review_items.c, review_labels.c
    for start in range(0, len(ordered), _CHUNK_ROWS):
        chunk = ordered[start:start + _CHUNK_ROWS]
        query = (select(r.sample_id, r.metric, lab.reviewer, lab.score, lab.raw_value,
                        lab.comment)
                 .join(review_labels, lab.item_id == r.id)
                 .where(tuple_(r.sample_id, r.metric).in_(chunk))
                 .order_by(r.sample_id, r.metric, lab.reviewer, lab.score))
        for row in conn.execute(query):
            found[row[0], row[1]].append({"reviewer": row[2], "score": row[3],
                                          "value": row[4], "comment": row[5]})
    return found


def _copy_items(conn: Connection, dataset_id: int, items: Sequence[DatasetItem], *,
                now: datetime) -> list[int]:
    """Copy items not yet in the dataset; the row ids of all of them, in order."""
    i = dataset_items.c
    existing: dict[str, int] = {row[0]: row[1] for row in conn.execute(
        select(i.verdict_key, i.id).where(i.dataset_id == dataset_id))}
    fresh = [item for item in dict((item.verdict_key, item) for item in items).values()
             if item.verdict_key not in existing]
    for start in range(0, len(fresh), _CHUNK_ROWS):
        rows = [_item_row(item, dataset_id=dataset_id, now=now)
                for item in fresh[start:start + _CHUNK_ROWS]]
        for row in conn.execute(dataset_items.insert().returning(i.verdict_key, i.id), rows):
            existing[row[0]] = row[1]
    return [existing[item.verdict_key] for item in items]


def _item_row(item: DatasetItem, *, dataset_id: int, now: datetime) -> dict[str, Any]:
    return {
        "dataset_id": dataset_id, "verdict_key": item.verdict_key, "sample_id": item.sample_id,
        "metric": item.metric, "prompt_version": item.prompt_version,
        "judge_model": item.judge_model, "status": item.status,
        "error_class": item.error_class, "scores": item.scores,
        "raw_scores": item.raw_scores, "reason": item.reason, "attributes": item.attributes,
        "sample": item.sample, "sample_ts": to_utc(item.sample_ts),
        "judged_at": to_utc(item.judged_at), "reviews": item.reviews, "added_at": to_utc(now),
    }


def _new_version(conn: Connection, dataset_id: int, name: str, item_ids: Sequence[int], *,
                 note: str, now: datetime) -> DatasetVersion:
    number = (_latest(conn, dataset_id, missing_ok=True) or 0) + 1
    conn.execute(dataset_versions.insert().values(
        dataset_id=dataset_id, version=number, created_at=to_utc(now),
        note=note[:MAX_NOTE_CHARS]))
    rows = [{"dataset_id": dataset_id, "version": number, "position": position,
             "item_id": item_id} for position, item_id in enumerate(item_ids)]
    for start in range(0, len(rows), _CHUNK_ROWS):
        conn.execute(dataset_members.insert(), rows[start:start + _CHUNK_ROWS])
    return DatasetVersion(dataset=name, version=number, created_at=to_utc(now),
                          note=note[:MAX_NOTE_CHARS], items=len(rows))


def _dataset_id(conn: Connection, name: str, *, lock: bool = False) -> int | None:
    query = select(datasets.c.id).where(datasets.c.name == name)
    # Writers of one dataset take turns (Postgres; SQLite has one writer at a time), so
    # two new versions never take the same number.
    return conn.execute(query.with_for_update() if lock else query).scalar()


def _existing_id(conn: Connection, name: str, *, lock: bool = False) -> int:
    dataset_id = _dataset_id(conn, check_name(name), lock=lock)
    if dataset_id is None:
        raise _unknown(name)
    return dataset_id


def _unknown(name: str) -> InvalidDataset:
    return InvalidDataset(f"no dataset named {name!r} (evalfleet dataset list)", field="name")


def _latest(conn: Connection, dataset_id: int, *, missing_ok: bool = False) -> int:
    number = conn.execute(select(func.max(dataset_versions.c.version)).where(
        dataset_versions.c.dataset_id == dataset_id)).scalar()
    if number is None and not missing_ok:
        raise InvalidDataset("the dataset has no version", field="version")
    return int(number or 0)


def _member_ids(conn: Connection, dataset_id: int, version: int) -> list[int]:
    m = dataset_members.c
    return list(conn.execute(select(m.item_id).where(
        m.dataset_id == dataset_id, m.version == version).order_by(m.position)).scalars())


def _count_items(conn: Connection, condition: Any) -> int:
    return int(conn.execute(select(func.count()).select_from(dataset_items)
                            .where(condition)).scalar_one())


def _delete_items(conn: Connection, item_ids: Sequence[int]) -> int:
    # Members first, explicitly: SQLite enforces the cascade only with foreign keys on.
    conn.execute(delete(dataset_members).where(dataset_members.c.item_id.in_(item_ids)))
    return int(conn.execute(delete(dataset_items).where(
        dataset_items.c.id.in_(item_ids))).rowcount or 0)


def _delete_datasets(conn: Connection, dataset_ids: Sequence[int]) -> None:
    if not dataset_ids:
        return
    for table in (dataset_members, dataset_items, dataset_versions):
        conn.execute(delete(table).where(table.c.dataset_id.in_(list(dataset_ids))))
    conn.execute(delete(datasets).where(datasets.c.id.in_(list(dataset_ids))))


def _version(conn: Connection, dataset_id: int, name: str, number: int) -> DatasetVersion:
    ver, m = dataset_versions.c, dataset_members.c
    row = conn.execute(select(ver.created_at, ver.note).where(
        ver.dataset_id == dataset_id, ver.version == number)).one()
    count = conn.execute(select(func.count()).where(
        m.dataset_id == dataset_id, m.version == number)).scalar_one()
    return DatasetVersion(dataset=name, version=number, created_at=to_utc(row[0]),
                          note=row[1], items=int(count))


def _info(conn: Connection, row: RowMapping) -> DatasetInfo:
    return DatasetInfo(
        name=row["name"], description=row["description"],
        retention_days=row["retention_days"], created_at=to_utc(row["created_at"]),
        latest=_version(conn, row["id"], row["name"], _latest(conn, row["id"])))


def _item(row: RowMapping) -> DatasetItem:
    return DatasetItem(
        verdict_key=row["verdict_key"], sample_id=row["sample_id"], metric=row["metric"],
        prompt_version=row["prompt_version"], judge_model=row["judge_model"],
        status=row["status"], error_class=row["error_class"], scores=row["scores"],
        raw_scores=row["raw_scores"], reason=row["reason"], attributes=row["attributes"],
        sample=row["sample"], sample_ts=to_utc(row["sample_ts"]),
        judged_at=to_utc(row["judged_at"]), reviews=row["reviews"])
