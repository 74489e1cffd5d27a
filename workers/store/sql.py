"""The SQLAlchemy verdict store; dialect subclasses only choose the engine and INSERT.

Every write is one short transaction; no connection is held across a judge call.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, Table, delete, exists, func, select
from sqlalchemy.engine import Connection, RowMapping
from sqlalchemy.exc import InterfaceError, OperationalError

from evalfleet.errors import StoreUnavailable
from workers.store.base import (
    Claim,
    ClaimState,
    DeadLetter,
    StoreCounts,
    VerdictKey,
    VerdictRecord,
    VerdictStore,
)
from workers.store.schema import claims, dead_letters, verdict_scores, verdicts

#: Rows fetched per round trip when streaming an export.
STREAM_BATCH_ROWS = 1000


class SqlStore(VerdictStore):
    """Verdict store over a SQLAlchemy engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def insert(self, table: Table) -> Any:
        """The dialect's INSERT construct (it carries ``on_conflict_*``)."""
        raise NotImplementedError

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        with _unavailable_on_disconnect(), self.engine.begin() as conn:
            yield conn

    @contextmanager
    def _connection(self) -> Iterator[Connection]:
        with _unavailable_on_disconnect(), self.engine.connect() as conn:
            yield conn

    def claim(self, key: VerdictKey, *, owner: str, lease_s: float, now: datetime) -> Claim:
        """See :meth:`VerdictStore.claim`."""
        now = to_utc(now)
        with self._transaction() as conn:
            if conn.execute(select(exists().where(*_key_filter(key)))).scalar():
                return Claim(ClaimState.DONE)
            digest, expires_at = key.digest(), now + timedelta(seconds=lease_s)
            # Take the key if it is free, expired, or already ours.
            take = (
                self.insert(claims).values(key=digest, owner=owner, expires_at=expires_at)
                .on_conflict_do_update(
                    index_elements=[claims.c.key],
                    set_={"owner": owner, "expires_at": expires_at},
                    where=(claims.c.expires_at < now) | (claims.c.owner == owner),
                )
                .returning(claims.c.owner)
            )
            if conn.execute(take).first() is not None:
                return Claim(ClaimState.CLAIMED)
            expires_at = conn.execute(
                select(claims.c.expires_at).where(claims.c.key == digest),
            ).scalar_one()
            remaining_s = (to_utc(expires_at) - now).total_seconds()
            return Claim(ClaimState.BUSY, retry_in_s=max(0.0, remaining_s))

    def release(self, key: VerdictKey, *, owner: str) -> None:
        """See :meth:`VerdictStore.release`."""
        with self._transaction() as conn:
            _drop_claim(conn, key, owner)

    def save_verdict(self, record: VerdictRecord, *, owner: str) -> bool:
        """See :meth:`VerdictStore.save_verdict`."""
        sample_ts = to_utc(record.sample_ts)
        row = _verdict_row(record) | {"sample_ts": sample_ts}
        statement = self.insert(verdicts).values(**row).on_conflict_do_nothing()
        statement = statement.returning(verdicts.c.id)
        with self._transaction() as conn:
            verdict_id = conn.execute(statement).scalar()
            # Only real values go to the aggregation table; nulls stay in the verdict.
            score_rows = [
                {"verdict_id": verdict_id, "name": name, "metric": record.key.metric,
                 "value": value, "sample_ts": sample_ts}
                for name, value in record.scores.items() if value is not None
            ]
            if verdict_id is not None and score_rows:
                conn.execute(verdict_scores.insert(), score_rows)
            _drop_claim(conn, record.key, owner)
        return verdict_id is not None

    def save_dead_letter(self, letter: DeadLetter, *, key: VerdictKey | None, owner: str) -> None:
        """See :meth:`VerdictStore.save_dead_letter`."""
        with self._transaction() as conn:
            conn.execute(dead_letters.insert().values(
                sample_id=letter.sample_id, metric=letter.metric, error_class=letter.error_class,
                error=letter.error, attempts=letter.attempts, payload=letter.payload,
                created_at=to_utc(letter.created_at),
            ))
            if key is not None:
                _drop_claim(conn, key, owner)

    def iter_verdicts(
        self, *, metric: str | None = None, since: datetime | None = None,
        until: datetime | None = None,
    ) -> Iterator[VerdictRecord]:
        """See :meth:`VerdictStore.iter_verdicts`."""
        query = select(verdicts).order_by(verdicts.c.created_at, verdicts.c.id)
        if metric is not None:
            query = query.where(verdicts.c.metric == metric)
        if since is not None:
            query = query.where(verdicts.c.created_at >= to_utc(since))
        if until is not None:
            query = query.where(verdicts.c.created_at < to_utc(until))
        with self._connection() as conn:
            result = conn.execution_options(yield_per=STREAM_BATCH_ROWS).execute(query)
            for row in result.mappings():
                yield _verdict_record(row)

    def iter_dead_letters(self, *, metric: str | None = None) -> Iterator[DeadLetter]:
        """See :meth:`VerdictStore.iter_dead_letters`."""
        query = select(dead_letters).order_by(dead_letters.c.id)
        if metric is not None:
            query = query.where(dead_letters.c.metric == metric)
        with self._connection() as conn:
            for row in conn.execute(query).mappings():
                yield DeadLetter(
                    sample_id=row["sample_id"], metric=row["metric"],
                    error_class=row["error_class"], error=row["error"],
                    attempts=row["attempts"], payload=row["payload"],
                    created_at=to_utc(row["created_at"]),
                )

    def counts(self) -> StoreCounts:
        """See :meth:`VerdictStore.counts`."""
        with self._connection() as conn:
            return StoreCounts(
                verdicts=conn.execute(select(func.count()).select_from(verdicts)).scalar_one(),
                dead_letters=conn.execute(
                    select(func.count()).select_from(dead_letters)).scalar_one(),
            )

    def close(self) -> None:
        """See :meth:`VerdictStore.close`."""
        self.engine.dispose()


@contextmanager
def _unavailable_on_disconnect() -> Iterator[None]:
    """Translate "the database cannot be reached" into :class:`StoreUnavailable`."""
    try:
        yield
    except (OperationalError, InterfaceError) as exc:
        raise StoreUnavailable(f"the database is unavailable: {type(exc.orig).__name__}") from exc


def to_utc(moment: datetime) -> datetime:
    """``moment`` in UTC; naive times (as SQLite returns them) are taken as UTC."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def _key_filter(key: VerdictKey) -> tuple[Any, ...]:
    return (
        verdicts.c.sample_id == key.sample_id,
        verdicts.c.metric == key.metric,
        verdicts.c.prompt_version == key.prompt_version,
        verdicts.c.judge_model == key.judge_model,
    )


def _drop_claim(conn: Connection, key: VerdictKey, owner: str) -> None:
    conn.execute(delete(claims).where(claims.c.key == key.digest(), claims.c.owner == owner))


def _verdict_row(record: VerdictRecord) -> dict[str, Any]:
    return {
        "sample_id": record.key.sample_id, "metric": record.key.metric,
        "prompt_version": record.key.prompt_version, "judge_model": record.key.judge_model,
        "status": record.status, "error_class": record.error_class, "error": record.error,
        "reason": record.reason, "scores": record.scores, "raw_scores": record.raw_scores,
        "raw_output": record.raw_output, "attempts": record.attempts,
        "latency_ms": record.latency_ms, "prompt_tokens": record.prompt_tokens,
        "completion_tokens": record.completion_tokens, "attributes": record.attributes,
        "created_at": to_utc(record.created_at),
    }


def _verdict_record(row: RowMapping) -> VerdictRecord:
    return VerdictRecord(
        key=VerdictKey(row["sample_id"], row["metric"], row["prompt_version"], row["judge_model"]),
        status=row["status"], error_class=row["error_class"], error=row["error"],
        reason=row["reason"], scores=row["scores"], raw_scores=row["raw_scores"],
        raw_output=row["raw_output"], attempts=row["attempts"], latency_ms=row["latency_ms"],
        prompt_tokens=row["prompt_tokens"], completion_tokens=row["completion_tokens"],
        attributes=row["attributes"], sample_ts=to_utc(row["sample_ts"]),
        created_at=to_utc(row["created_at"]),
    )
