"""Reads behind corrected estimates: a score's sums over a window, and the review items of a pool.

The judge's side is three sums (count, sum, sum of squares of the stored normalised
score) over the production verdicts of a metric's segment, read from ``verdict_scores``
along its ``(metric, name, sample_ts)`` index, joined to ``verdicts`` for the segment's
attributes only when there is a segment; ``created_at`` is bound too, so Postgres reads
only the partitions of the range. People's side is the review items whose samples were
taken in the pool, on sample time like the verdicts (random and chosen: the caller uses
the first and counts the second), with their labels. Both sides leave out provisional
session versions until they are marked final (``evalfleet.store.finality``): their
scores are not in ``verdict_scores`` yet, and their review items wait.
Postgres and SQLite alike.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, select
from sqlalchemy.engine import Connection

from evalfleet.core.labelpool import PoolItem
from evalfleet.core.sums import RunningSums
from evalfleet.store.dialect import is_sqlite
from evalfleet.store.partitions import created_since
from evalfleet.store.queries.cascade import StoredThresholds, ThresholdBook
from evalfleet.store.queries.evidence import attributes_match
from evalfleet.store.schema import (
    cascade_thresholds,
    review_items,
    review_labels,
    verdict_scores,
    verdicts,
)
from evalfleet.store.sql import SqlStore, to_utc


class EstimateReads:
    """The reads of corrected estimates from one verdict store.

    Args:
        store: The store.
        conn: A connection to read on instead of one of the store's own (the alert
            engine's, inside a transaction that SQLite would otherwise lock against).
    """

    def __init__(self, store: SqlStore, *, conn: Connection | None = None) -> None:
        self.store = store
        self._conn = conn

    def on(self, conn: Connection) -> EstimateReads:
        """The same reads on ``conn``."""
        return EstimateReads(self.store, conn=conn)

    def _connect(self) -> AbstractContextManager[Connection]:
        return nullcontext(self._conn) if self._conn is not None else self.store.connect()

    def score_sums(self, *, metric: str, score: str, start: datetime, end: datetime,
                   segment: Mapping[str, str],
                   filters: Mapping[str, Sequence[str]] = {}) -> RunningSums:
        """A score's sums over the production verdicts sampled in ``[start, end)``.

        Args:
            metric: The metric.
            score: The score's name.
            start: First sample time (inclusive).
            end: Last sample time (exclusive).
            segment: Attributes a verdict must have (empty: every verdict).
            filters: Attributes a verdict must have one of the values of (an alert
                rule's filters).

        Returns:
            Count, sum and sum of squares of the normalised score.
        """
        vs = verdict_scores.c
        start, end = to_utc(start), to_utc(end)
        query = select(func.count(vs.value), func.sum(vs.value),
                       func.sum(vs.value * vs.value)).where(
            vs.metric == metric, vs.name == score, vs.sample_ts >= start, vs.sample_ts < end,
            vs.created_at >= created_since(start))
        with self._connect() as conn:
            if segment or filters:
                query = query.select_from(verdict_scores.join(
                    verdicts, verdicts.c.id == vs.verdict_id)).where(
                    verdicts.c.created_at >= created_since(start),
                    *attributes_match(segment, filters, containment=not is_sqlite(conn)))
            n, total, squares = conn.execute(query).one()
        return RunningSums(n=int(n or 0), total=float(total or 0.0),
                           total_sq=float(squares or 0.0))

    def cascade_fit(self, *, metric: str, identity: str) -> StoredThresholds | None:
        """The latest fit of a metric's cascade thresholds (what workers judge with), or
        None before any fit."""
        return ThresholdBook(self.store).latest(metric=metric, identity=identity)

    def labels_mark(self) -> tuple[int, datetime | None]:
        """How many labels there are and when the last was given or a cascade's thresholds
        were last fitted: changes whenever either happens (both change what a cascade's
        labels correct), so a kept estimate can tell it is out of date."""
        lab, fits = review_labels.c, cascade_thresholds.c
        with self._connect() as conn:
            count, last = conn.execute(select(func.count(), func.max(lab.created_at))).one()
            refit = conn.execute(select(func.max(fits.created_at))).scalar_one()
        marks = [to_utc(moment) for moment in (last, refit) if moment is not None]
        return int(count or 0), max(marks, default=None)

    def latest_sample_at(self) -> datetime | None:
        """The newest sample time of any scored verdict, or None when there is none: where
        a default period ends when nothing is recent (a demo's dated samples)."""
        with self._connect() as conn:
            latest = conn.execute(select(func.max(verdict_scores.c.sample_ts))).scalar_one()
        return None if latest is None else to_utc(latest)

    def pool_items(self, *, metric: str, start: datetime, end: datetime,
                   with_cascade: bool = False) -> list[PoolItem]:
        """The metric's review items whose samples were taken in ``[start, end)``, with
        their labels.

        Args:
            metric: The metric.
            start: First sample time (inclusive).
            end: Last sample time (exclusive).
            with_cascade: Read each item's verdict's cascade record too (a cascade
                metric's labels are re-scored with the thresholds in use).

        Returns:
            Every item, random or chosen, in queue order.
        """
        i, lab, v = review_items.c, review_labels.c, verdicts.c
        start, end = to_utc(start), to_utc(end)
        # An item whose verdict is a provisional session version counts once it is final,
        # as the verdict's score does on the judge's side (evalfleet.store.finality).
        provisional = select(v.id).where(
            v.metric == metric, v.sample_ts >= start, v.sample_ts < end,
            v.created_at >= created_since(start), v.provisional,
            v.sample_id == i.sample_id, v.prompt_version == i.prompt_version,
            v.judge_model == i.judge_model).exists()
        where = (i.metric == metric, i.sample_ts >= start, i.sample_ts < end, ~provisional)
        columns = [i.id, i.sample_id, i.reason, i.probability, i.stratum, i.judge_scores,
                   i.attributes]
        items_query = select(*columns).where(*where).order_by(i.id)
        if with_cascade:
            # An alias of its own: the provisional test above correlates on ``verdicts``.
            kept = verdicts.alias("kept")
            items_query = select(*columns, kept.c.cascade).select_from(review_items.outerjoin(
                kept, and_(kept.c.metric == i.metric, kept.c.sample_id == i.sample_id,
                           kept.c.prompt_version == i.prompt_version,
                           kept.c.judge_model == i.judge_model,
                           kept.c.created_at >= created_since(start)))).where(
                *where).order_by(i.id)
        labels_query = (select(lab.item_id, lab.score, lab.raw_value)
                        .join(review_items, i.id == lab.item_id).where(*where)
                        .order_by(lab.item_id, lab.reviewer))
        given: dict[int, dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
        with self._connect() as conn:
            rows = conn.execute(items_query).all()
            for item_id, score, raw in conn.execute(labels_query):
                given[item_id][score].append(raw)
        return [PoolItem(id=row[0], sample_id=row[1], reason=row[2], probability=row[3],
                         stratum=row[4], judge_scores=dict(row[5] or {}),
                         attributes=dict(row[6] or {}),
                         labels={k: list(v) for k, v in given.get(row[0], {}).items()},
                         cascade=row[7] if with_cascade else None)
                for row in rows]
