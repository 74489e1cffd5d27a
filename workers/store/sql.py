"""The SQLAlchemy verdict store; dialect subclasses only choose the engine and INSERT.

Every write is one short transaction; no connection is held across a judge call.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, Table, delete, func, select, tuple_
from sqlalchemy.engine import Connection, RowMapping
from sqlalchemy.exc import InterfaceError, OperationalError

from evalfleet.errors import StoreUnavailable
from workers.store.base import (
    Claim,
    ClaimState,
    DailyCost,
    DeadLetter,
    StoreCounts,
    VerdictKey,
    VerdictRecord,
    VerdictStore,
)
from workers.store.schema import claims, verdict_scores
from workers.store.schema import dead_letters as dead_letters_table
from workers.store.schema import verdicts as verdicts_table

_KEY_COLUMNS = (
    verdicts_table.c.sample_id, verdicts_table.c.metric, verdicts_table.c.prompt_version,
    verdicts_table.c.judge_model,
)

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

    def claim(
        self, keys: Sequence[VerdictKey], *, owner: str, lease_s: float, now: datetime,
    ) -> list[Claim]:
        """See :meth:`VerdictStore.claim`."""
        if not keys:
            return []
        now = to_utc(now)
        with self._transaction() as conn:
            done, taken, held = self.take_claims(
                conn, keys, owner=owner, now=now, expires_at=now + timedelta(seconds=lease_s))
        return [_claim_state(key, done=done, taken=taken, held=held, now=now) for key in keys]

    def take_claims(
        self, conn: Connection, keys: Sequence[VerdictKey], *, owner: str, now: datetime,
        expires_at: datetime,
    ) -> tuple[set[VerdictKey], set[str], dict[str, datetime]]:
        """The claim's work inside its transaction (dialects may do it in fewer trips).

        Returns:
            The keys already settled, the digests now held by ``owner``, and for the
            other digests held by someone else, until when.
        """
        done = _settled(conn, keys)
        todo = {key.digest(): key for key in keys if key not in done}
        taken: set[str] = set()
        if todo:
            # Take each key that is free, expired, or already ours.
            take = self.insert(claims).on_conflict_do_update(
                index_elements=[claims.c.key],
                set_={"owner": owner, "expires_at": expires_at},
                where=(claims.c.expires_at < now) | (claims.c.owner == owner),
            ).returning(claims.c.key)
            rows = [{"key": digest, "owner": owner, "expires_at": expires_at}
                    for digest in todo]
            taken = set(conn.execute(take, rows).scalars())
        busy = [digest for digest in todo if digest not in taken]
        held: dict[str, datetime] = {
            digest: until for digest, until in conn.execute(
                select(claims.c.key, claims.c.expires_at).where(claims.c.key.in_(busy)))
        } if busy else {}
        return done, taken, held

    def save(
        self, *, verdicts: Sequence[VerdictRecord] = (), dead_letters: Sequence[DeadLetter] = (),
        release: Sequence[VerdictKey] = (), owner: str,
    ) -> int:
        """See :meth:`VerdictStore.save`."""
        inserted = 0
        with self._transaction() as conn:
            if verdicts:
                inserted = self._insert_verdicts(conn, verdicts)
            if dead_letters:
                self._insert_dead_letters(conn, dead_letters)
            keys = [record.key.digest() for record in verdicts] + [k.digest() for k in release]
            if keys:
                conn.execute(delete(claims).where(claims.c.key.in_(keys), claims.c.owner == owner))
        return inserted

    def _insert_dead_letters(self, conn: Connection, letters: Sequence[DeadLetter]) -> None:
        # A key settles once: a second copy of the job (redelivered while the first was
        # judged) adds no second dead letter; its claim already finds the first.
        conn.execute(self.insert(dead_letters_table).on_conflict_do_nothing(),
                     [_dead_letter_row(letter) for letter in letters])

    def _insert_verdicts(self, conn: Connection, records: Sequence[VerdictRecord]) -> int:
        statement = self.insert(verdicts_table).on_conflict_do_nothing().returning(
            verdicts_table.c.id, *_KEY_COLUMNS)
        new_ids = {VerdictKey(*row[1:]): row[0]
                   for row in conn.execute(statement, [verdict_row(r) for r in records])}
        # Only real values go to the aggregation table; nulls stay in the verdict.
        score_rows = [
            {"verdict_id": new_ids[record.key], "name": name, "metric": record.key.metric,
             "value": value, "sample_ts": to_utc(record.sample_ts)}
            for record in records if record.key in new_ids
            for name, value in record.scores.items() if value is not None
        ]
        if score_rows:
            conn.execute(verdict_scores.insert(), score_rows)
        return len(new_ids)

    def iter_verdicts(
        self, *, metric: str | None = None, since: datetime | None = None,
        until: datetime | None = None,
    ) -> Iterator[VerdictRecord]:
        """See :meth:`VerdictStore.iter_verdicts`."""
        query = select(verdicts_table).order_by(verdicts_table.c.created_at, verdicts_table.c.id)
        if metric is not None:
            query = query.where(verdicts_table.c.metric == metric)
        if since is not None:
            query = query.where(verdicts_table.c.created_at >= to_utc(since))
        if until is not None:
            query = query.where(verdicts_table.c.created_at < to_utc(until))
        with self._connection() as conn:
            result = conn.execution_options(yield_per=STREAM_BATCH_ROWS).execute(query)
            for row in result.mappings():
                yield _verdict_record(row)

    def iter_dead_letters(self, *, metric: str | None = None) -> Iterator[DeadLetter]:
        """See :meth:`VerdictStore.iter_dead_letters`."""
        query = select(dead_letters_table).order_by(dead_letters_table.c.id)
        if metric is not None:
            query = query.where(dead_letters_table.c.metric == metric)
        with self._connection() as conn:
            for row in conn.execute(query).mappings():
                yield dead_letter_from_row(row)

    def day_of(self, column: Any) -> Any:
        """SQL for the UTC day of a timestamp column (dialects differ)."""
        raise NotImplementedError

    def seconds_between(self, later: Any, earlier: Any) -> Any:
        """SQL for ``later - earlier`` in seconds, a float (dialects differ)."""
        raise NotImplementedError

    def daily_costs(self, *, since: datetime) -> list[DailyCost]:
        """See :meth:`VerdictStore.daily_costs`."""
        v = verdicts_table.c
        day = self.day_of(v.created_at).label("day")
        query = (
            select(day, v.metric, func.count(), func.coalesce(func.sum(v.prompt_tokens), 0),
                   func.coalesce(func.sum(v.completion_tokens), 0),
                   func.coalesce(func.sum(v.cost_usd), 0.0))
            .where(v.created_at >= to_utc(since)).group_by(day, v.metric).order_by(day, v.metric)
        )
        with self._connection() as conn:
            return [
                DailyCost(day=_as_date(row[0]), metric=row[1], verdicts=row[2],
                          prompt_tokens=int(row[3]), completion_tokens=int(row[4]),
                          cost_usd=float(row[5]))
                for row in conn.execute(query)
            ]

    def counts(self) -> StoreCounts:
        """See :meth:`VerdictStore.counts`."""
        with self._connection() as conn:
            return StoreCounts(
                verdicts=conn.execute(select(func.count()).select_from(verdicts_table)).scalar_one(),
                dead_letters=conn.execute(
                    select(func.count()).select_from(dead_letters_table)).scalar_one(),
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


def _as_date(value: Any) -> date:
    return value if isinstance(value, date) else date.fromisoformat(str(value))


def to_utc(moment: datetime) -> datetime:
    """``moment`` in UTC; naive times (as SQLite returns them) are taken as UTC."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def _settled(conn: Connection, keys: Sequence[VerdictKey]) -> set[VerdictKey]:
    """The keys that already have a verdict or a dead letter."""
    found = conn.execute(select(*_KEY_COLUMNS).where(
        tuple_(*_KEY_COLUMNS).in_([tuple(_key_tuple(key)) for key in keys])))
    settled = {VerdictKey(*row) for row in found}
    by_digest = {key.digest(): key for key in keys if key not in settled}
    if by_digest:
        settled.update(by_digest[digest] for digest in conn.execute(
            select(dead_letters_table.c.verdict_key)
            .where(dead_letters_table.c.verdict_key.in_(list(by_digest)))).scalars())
    return settled


def _key_tuple(key: VerdictKey) -> tuple[str, str, str, str]:
    return (key.sample_id, key.metric, key.prompt_version, key.judge_model)


def _claim_state(key: VerdictKey, *, done: set[VerdictKey], taken: set[str],
                 held: dict[str, datetime], now: datetime) -> Claim:
    if key in done:
        return Claim(ClaimState.DONE)
    digest = key.digest()
    if digest in taken:
        return Claim(ClaimState.CLAIMED)
    remaining_s = (to_utc(held[digest]) - now).total_seconds() if digest in held else 0.0
    return Claim(ClaimState.BUSY, retry_in_s=max(0.0, remaining_s))


def _dead_letter_row(letter: DeadLetter) -> dict[str, Any]:
    return {
        "sample_id": letter.sample_id, "metric": letter.metric,
        "error_class": letter.error_class, "error": letter.error, "attempts": letter.attempts,
        "payload": letter.payload, "created_at": to_utc(letter.created_at),
        "history": letter.history, "verdict_key": letter.verdict_key,
    }


def dead_letter_from_row(row: RowMapping) -> DeadLetter:
    """A ``dead_letters`` row as a :class:`DeadLetter`."""
    return DeadLetter(
        sample_id=row["sample_id"], metric=row["metric"], error_class=row["error_class"],
        error=row["error"], attempts=row["attempts"], payload=row["payload"],
        created_at=to_utc(row["created_at"]), history=row["history"] or [],
        verdict_key=row["verdict_key"],
    )


def verdict_row(record: VerdictRecord) -> dict[str, Any]:
    """The ``verdicts`` row of a record."""
    return {
        "sample_id": record.key.sample_id, "metric": record.key.metric,
        "prompt_version": record.key.prompt_version, "judge_model": record.key.judge_model,
        "status": record.status, "error_class": record.error_class, "error": record.error,
        "reason": record.reason, "scores": record.scores, "raw_scores": record.raw_scores,
        "raw_output": record.raw_output, "attempts": record.attempts,
        "latency_ms": record.latency_ms, "prompt_tokens": record.prompt_tokens,
        "completion_tokens": record.completion_tokens, "cost_usd": record.cost_usd,
        "attributes": record.attributes,
        "sample_ts": to_utc(record.sample_ts), "created_at": to_utc(record.created_at),
    }


def _verdict_record(row: RowMapping) -> VerdictRecord:
    return VerdictRecord(
        key=VerdictKey(row["sample_id"], row["metric"], row["prompt_version"], row["judge_model"]),
        status=row["status"], error_class=row["error_class"], error=row["error"],
        reason=row["reason"], scores=row["scores"], raw_scores=row["raw_scores"],
        raw_output=row["raw_output"], attempts=row["attempts"], latency_ms=row["latency_ms"],
        prompt_tokens=row["prompt_tokens"], completion_tokens=row["completion_tokens"],
        attributes=row["attributes"], sample_ts=to_utc(row["sample_ts"]),
        created_at=to_utc(row["created_at"]), cost_usd=row["cost_usd"],
    )
