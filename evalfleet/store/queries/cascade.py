"""A judge cascade's thresholds in the verdict store, and the labelled items they are fitted on.

Thresholds are versioned: each fit is a new row under (metric, cascade identity, version),
never an update, so what a verdict's ``cascade.thresholds_version`` names can be read
back, and a refit is a judge change the estimates can see (docs/judges.md#cascades). The
worker reads the latest version of its metric's cascade. The identity is the cascade's
stand-in for the judge model in the verdict key (tiers and prompts), so another list of
tiers starts with no thresholds: it settles nothing until it is fitted.

The items a fit rests on are the random review items of the metric whose verdict the
cascade gave, with their labels and the verdict's cascade record (every tier's scores
and confidence: a random item is judged by every tier, ``workers.cascade``).
Postgres and SQLite alike.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, select

from evalfleet.core.review_slice import RANDOM_REASON
from evalfleet.store.schema import cascade_thresholds, review_items, review_labels, verdicts
from evalfleet.store.sql import SqlStore, to_utc


@dataclass(frozen=True)
class StoredThresholds:
    """One fit of a cascade's thresholds, as kept."""

    metric: str
    identity: str
    """The cascade's identity (``cascade:<digest>``)."""
    version: int
    """1 for the first fit of this metric and identity, then one more per fit."""
    thresholds: tuple[float | None, ...]
    """Each tier's lowest accepted confidence, cheapest first; None settles nothing."""
    report: dict[str, Any]
    """The fit: guarantee, labels and settled share per tier."""
    created_at: datetime

    @property
    def folds(self) -> tuple[tuple[float | None, ...], ...]:
        """A cross-fitted fit's thresholds per fold (``report["folds"]``: fold k's fitted
        without fold k's labels); empty when not cross-fitted."""
        folds = self.report.get("folds")
        if not isinstance(folds, list) or not all(
                isinstance(fold, list) and len(fold) == len(self.thresholds) for fold in folds):
            return ()
        return tuple(tuple(None if value is None else float(value) for value in fold)
                     for fold in folds)


@dataclass(frozen=True)
class CascadeLabelItem:
    """A random review item of a cascade's verdict, with its labels."""

    item_id: int
    sample_id: str
    stratum: str | None
    """The review stratum it was drawn in (None: the base rate)."""
    probability: float | None
    cascade: dict[str, Any] | None
    """The verdict's cascade record (None when the verdict is gone)."""
    labels: dict[str, list[Any]] = field(default_factory=dict)
    """By score: each reviewer's value on the judge's scale (None: cannot say)."""


class ThresholdBook:
    """Fitted thresholds of judge cascades in one verdict store."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store

    def save(self, *, metric: str, identity: str, thresholds: Sequence[float | None],
             report: dict[str, Any], now: datetime) -> StoredThresholds:
        """Keep a new fit as the next version of the metric's cascade.

        Args:
            metric: The metric.
            identity: The cascade's identity.
            thresholds: Each tier's threshold, cheapest first.
            report: The fit, as JSON.
            now: When it was fitted.

        Returns:
            What was stored, with its version.

        Raises:
            StoreUnavailable: The database cannot be reached.
        """
        c = cascade_thresholds.c
        with self.store.begin() as conn:
            latest = conn.execute(select(func.max(c.version)).where(
                c.metric == metric, c.identity == identity)).scalar_one()
            row = StoredThresholds(metric, identity, (latest or 0) + 1, tuple(thresholds),
                                   report, to_utc(now))
            conn.execute(cascade_thresholds.insert(), {
                "metric": metric, "identity": identity, "version": row.version,
                "thresholds": list(row.thresholds), "report": report,
                "created_at": row.created_at})
        return row

    def latest(self, *, metric: str, identity: str) -> StoredThresholds | None:
        """The thresholds a worker uses for the metric's cascade; None before any fit."""
        c = cascade_thresholds.c
        query = (select(cascade_thresholds).where(c.metric == metric, c.identity == identity)
                 .order_by(c.version.desc()).limit(1))
        with self.store.connect() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else _stored(row)

    def history(self, *, metric: str) -> list[StoredThresholds]:
        """Every fit of the metric's cascades, oldest first."""
        c = cascade_thresholds.c
        query = (select(cascade_thresholds).where(c.metric == metric)
                 .order_by(c.created_at, c.version))
        with self.store.connect() as conn:
            return [_stored(row) for row in conn.execute(query).mappings()]

    def labelled_items(self, *, metric: str, identity: str) -> list[CascadeLabelItem]:
        """The metric's random review items of the cascade's verdicts that have labels.

        Args:
            metric: The metric.
            identity: The cascade's identity (the verdicts' ``judge_model``).

        Returns:
            The items in queue order, each with its verdict's cascade record.
        """
        i, v, lab = review_items.c, verdicts.c, review_labels.c
        where = (i.metric == metric, i.judge_model == identity, i.reason == RANDOM_REASON)
        items_query = (
            select(i.id, i.sample_id, i.stratum, i.probability, v.cascade)
            .outerjoin(verdicts, and_(v.metric == i.metric, v.sample_id == i.sample_id,
                                      v.prompt_version == i.prompt_version,
                                      v.judge_model == i.judge_model))
            .where(*where, i.labels_given > 0).order_by(i.id))
        labels_query = (select(lab.item_id, lab.score, lab.raw_value)
                        .join(review_items, i.id == lab.item_id).where(*where)
                        .order_by(lab.item_id, lab.reviewer))
        given: dict[int, dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
        with self.store.connect() as conn:
            rows = conn.execute(items_query).all()
            for item_id, score, raw in conn.execute(labels_query):
                given[item_id][score].append(raw)
        return [CascadeLabelItem(item_id=row[0], sample_id=row[1], stratum=row[2],
                                 probability=row[3], cascade=row[4],
                                 labels={k: list(vs) for k, vs in given.get(row[0], {}).items()})
                for row in rows]


def _stored(row: Any) -> StoredThresholds:
    return StoredThresholds(
        metric=row["metric"], identity=row["identity"], version=row["version"],
        thresholds=tuple(row["thresholds"]), report=dict(row["report"]),
        created_at=to_utc(row["created_at"]))
