"""Review items queued with the verdicts they review (:mod:`evalfleet.store.queries.review_queue`).

:meth:`SqlStore.save` calls :func:`queue_random` in the transaction that stores the
verdicts, so a stored verdict has always been considered for the random slice, and its
inclusion probability holds. An item already queued for the sample and metric (by
another worker, another judge model's verdict, or on demand) is left as it is.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.exc import DatabaseError

from evalfleet.core.checkspec import is_check_model
from evalfleet.core.review_slice import RANDOM_REASON, ReviewSlice
from evalfleet.store.base import VerdictRecord
from evalfleet.store.dialect import upsert
from evalfleet.store.schema import review_items

_log = logging.getLogger(__name__)


def queue_random(conn: Connection, records: Sequence[VerdictRecord], *,
                 review: ReviewSlice) -> int:
    """Queue the verdicts the random slice chooses (production and ``ok`` only, and never
    a check's: its score is what its code computed, with nothing for people to correct),
    in the caller's transaction; each item is created at its verdict's creation time.

    Returns:
        How many items were new.
    """
    rows = []
    for record in records:
        if (record.purpose != "production" or record.status != "ok"
                or is_check_model(record.key.judge_model)):
            continue
        choice = review.choose(sample_id=record.key.sample_id, metric=record.key.metric,
                               scores=record.scores,
                               confidence=record.cascade.get("confidence")
                               if record.cascade else None)
        if choice is not None:
            rows.append(item_row(
                record, reason=RANDOM_REASON, detail=None, probability=choice.probability,
                stratum=choice.stratum, labels_wanted=review.labels_wanted,
                now=record.created_at,
                expires_at=record.created_at + timedelta(seconds=review.expire_s)))
    if not rows:
        return 0
    # The verdicts matter more than their review: an item the database refuses is
    # logged and left out (a savepoint keeps the verdicts' transaction whole).
    try:
        with conn.begin_nested():
            return insert_items(conn, rows)
    except DatabaseError as exc:
        _log.warning("review items not queued: %s", type(exc.orig).__name__)
        return 0


def insert_items(conn: Connection, rows: list[dict[str, Any]]) -> int:
    """Insert ``review_items`` rows; a sample and metric already queued is skipped.

    Returns:
        How many were new.
    """
    if not rows:
        return 0
    statement = upsert(conn, review_items).on_conflict_do_nothing().returning(review_items.c.id)
    return len(conn.execute(statement, rows).all())


def item_row(record: VerdictRecord, *, reason: str, detail: str | None,
             probability: float | None, stratum: str | None, labels_wanted: int,
             now: datetime, expires_at: datetime) -> dict[str, Any]:
    """The ``review_items`` row that queues ``record``'s sample and metric."""
    key = record.key
    return {
        "sample_id": key.sample_id, "metric": key.metric, "verdict_key": key.digest(),
        "prompt_version": key.prompt_version, "judge_model": key.judge_model,
        "reason": reason, "detail": detail, "probability": probability, "stratum": stratum,
        "labels_wanted": labels_wanted, "labels_given": 0, "skips": 0,
        "created_at": _utc(now), "sample_ts": _utc(record.sample_ts),
        "expires_at": _utc(expires_at),
        "judge_scores": record.scores, "judge_raw_scores": record.raw_scores,
        "judge_reason": record.reason, "attributes": record.attributes, "sample": record.sample,
    }


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
