"""The SQLAlchemy verdict store; dialect subclasses only choose the engine and INSERT.

Every write is one short transaction; no connection is held across a judge call.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from typing import Any, TypeAlias

from sqlalchemy import Engine, Table, delete, func, select, tuple_
from sqlalchemy.engine import Connection, RowMapping
from sqlalchemy.exc import DatabaseError, InterfaceError, OperationalError

from evalfleet.core.errors import StoreRejected, StoreUnavailable
from evalfleet.core.review_slice import ReviewSlice
from evalfleet.store.base import (
    CalibrationRun,
    Claim,
    ClaimState,
    DailyCost,
    DeadLetter,
    JudgeIdentity,
    StoreCounts,
    VerdictKey,
    VerdictRecord,
    VerdictStore,
)
from evalfleet.store.finality import finalise_pending, mark_pending
from evalfleet.store.intake import queue_random
from evalfleet.store.partitions import created_since
from evalfleet.store.schema import calibration_runs, claims, verdict_samples, verdict_scores
from evalfleet.store.schema import dead_letters as dead_letters_table
from evalfleet.store.schema import verdicts as verdicts_table
from evalfleet.store.storable import (
    key_problem,
    storable_dead_letter,
    storable_text,
    storable_verdict,
    verdict_problem,
)

_KEY_COLUMNS = (
    verdicts_table.c.sample_id, verdicts_table.c.metric, verdicts_table.c.prompt_version,
    verdicts_table.c.judge_model,
)

#: Rows fetched per round trip when streaming an export.
STREAM_BATCH_ROWS = 1000

#: An open connection of the store, as :meth:`SqlStore.begin` and :meth:`SqlStore.connect`
#: hand it out (every SQLAlchemy 2 connection runs in a transaction; ``begin``'s commits at
#: its end). Code outside the store holds it only to pass it back to the store's functions,
#: so that several of them share one transaction (the alert engine's cycle of a rule under
#: the rule's lock); it never executes a statement on it.
StoreConnection: TypeAlias = Connection

#: Called with a verdict the database refuses and why; returns the dead letter stored
#: in its place (see :meth:`SqlStore.save`).
RejectedVerdict = Callable[[VerdictRecord, StoreRejected], DeadLetter]


class SqlStore(VerdictStore):
    """Verdict store over a SQLAlchemy engine."""

    def __init__(self, engine: Engine, *, review: ReviewSlice | None = None) -> None:
        self.engine = engine
        self.review = review
        """The random review slice queued with each save (None: nothing is queued)."""

    def insert(self, table: Table) -> Any:
        """The dialect's INSERT construct (it carries ``on_conflict_*``)."""
        raise NotImplementedError

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        with translate_errors(), self.engine.begin() as conn:
            yield conn

    @contextmanager
    def _connection(self) -> Iterator[Connection]:
        with translate_errors(), self.engine.connect() as conn:
            yield conn

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        """A transaction for readers and writers beside the store (operator tooling, the
        web page), committed at the end. A database that is away raises the store's
        :class:`StoreUnavailable`, not SQLAlchemy's error."""
        with unavailable_as_store_error(), self.engine.begin() as conn:
            yield conn

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        """A connection for reading, with the store's errors (see :meth:`begin`)."""
        with unavailable_as_store_error(), self.engine.connect() as conn:
            yield conn

    def claim(
        self, keys: Sequence[VerdictKey], *, owner: str, lease_s: float, now: datetime,
    ) -> list[Claim]:
        """See :meth:`VerdictStore.claim`."""
        if not keys:
            return []
        with self._transaction() as conn:
            claims, _ = self._claims(conn, keys, owner=owner, lease_s=lease_s, now=now)
        return claims

    def _claims(
        self, conn: Connection, keys: Sequence[VerdictKey], *, owner: str, lease_s: float,
        now: datetime,
    ) -> tuple[list[Claim], set[str]]:
        """The claim of each key, taken in ``conn``'s transaction, and the digests taken."""
        now = to_utc(now)
        done, taken, held = self.take_claims(
            conn, keys, owner=owner, now=now, expires_at=now + timedelta(seconds=lease_s))
        return [claim_state(key, done=done, taken=taken, held=held, now=now)
                for key in keys], taken

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
        on_rejected: RejectedVerdict | None = None,
    ) -> int:
        """See :meth:`VerdictStore.save`.

        Text is made storable first (:mod:`evalfleet.store.storable`) and rows that are
        known to be refused are turned away before the database sees them. When the
        database still refuses the batch, each verdict is tried on its own (a savepoint
        each), so one refused verdict never holds back the others.
        """
        records, letters = storable_rows(verdicts, dead_letters, on_rejected=on_rejected)
        keys = [*release, *(record.key for record in verdicts)]
        try:
            inserted = self._save_rows(records, letters, release=keys, owner=owner,
                                       one_by_one=False, on_rejected=on_rejected)
        except StoreRejected:
            if on_rejected is None:
                raise
            inserted = self._save_rows(records, letters, release=keys, owner=owner,
                                       one_by_one=True, on_rejected=on_rejected)
        self._finalise_saved(records)
        return inserted

    def claim_and_save(
        self, keys: Sequence[VerdictKey], *, owner: str, lease_s: float, now: datetime,
        settle: Callable[[list[Claim]], Sequence[VerdictRecord]],
    ) -> list[Claim]:
        """See :meth:`VerdictStore.claim_and_save`: one connection, two statements on
        PostgreSQL (the claim's and the save's), one commit."""
        if not keys:
            return []
        with self._transaction() as conn:
            claims, taken = self._claims(conn, keys, owner=owner, lease_s=lease_s, now=now)
            records, _ = storable_rows(settle(claims), (), on_rejected=None)
            self.save_rows(conn, records, [], release=sorted(taken), owner=owner)
            if self.review is not None:
                queue_random(conn, records, review=self.review)
        self._finalise_saved(records)
        return claims

    def _save_rows(self, records: list[VerdictRecord], letters: list[DeadLetter], *,
                   release: Sequence[VerdictKey], owner: str, one_by_one: bool,
                   on_rejected: RejectedVerdict | None) -> int:
        keys = sorted({key.digest() for key in release})
        with self._transaction() as conn:
            if not one_by_one:
                inserted = self.save_rows(conn, records, letters, release=keys, owner=owner)
            else:
                inserted, records = self._save_one_by_one(conn, records, letters,
                                                          on_rejected=on_rejected)
                inserted += self.save_rows(conn, [], letters, release=keys, owner=owner)
            if self.review is not None:
                queue_random(conn, records, review=self.review)
        return inserted

    def _save_one_by_one(
        self, conn: Connection, records: list[VerdictRecord], letters: list[DeadLetter], *,
        on_rejected: RejectedVerdict | None,
    ) -> tuple[int, list[VerdictRecord]]:
        """Each verdict in a savepoint of its own; a refused one's dead letter joins
        ``letters``. Returns how many were new and the verdicts the database took."""
        inserted = 0
        taken: list[VerdictRecord] = []
        for record in records:
            try:
                with translate_errors(), conn.begin_nested():
                    inserted += self._insert_verdicts(conn, [record])
                taken.append(record)
            except StoreRejected as exc:
                assert on_rejected is not None
                letters.append(storable_dead_letter(on_rejected(record, exc)))
        return inserted, taken

    def save_rows(self, conn: Connection, records: list[VerdictRecord],
                  letters: list[DeadLetter], *, release: Sequence[str], owner: str) -> int:
        """The save's writes inside its transaction (dialects may do them in fewer trips):
        the verdicts with their scores and samples, the dead letters, and dropping
        ``owner``'s claims on the ``release`` digests.

        Returns:
            How many verdicts were new.
        """
        inserted = self._insert_verdicts(conn, records) if records else 0
        if letters:
            self._insert_dead_letters(conn, letters)
        if release:
            conn.execute(delete(claims).where(claims.c.key.in_(release), claims.c.owner == owner))
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
        # Only production values go to the aggregation table that alerts read; nulls,
        # and the scores of calibration, canary and shadow verdicts and of provisional
        # session versions (until marked final), stay in the verdict.
        score_rows = [
            {"verdict_id": new_ids[record.key], "name": name, "metric": record.key.metric,
             "value": value, "sample_ts": to_utc(record.sample_ts),
             "created_at": to_utc(record.created_at)}
            for record in records if record.key in new_ids and record.purpose == "production"
            and not record.provisional
            for name, value in record.scores.items() if value is not None
        ] + canary_rows(records, new_ids)
        if score_rows:
            conn.execute(verdict_scores.insert(), score_rows)
        samples = sample_rows(records, new_ids)
        if samples:
            conn.execute(verdict_samples.insert(), samples)
        return len(new_ids)

    def finalise(self, keys: Sequence[VerdictKey]) -> int:
        """See :meth:`VerdictStore.finalise`: the pending mark committed, then a look
        for the verdicts (``evalfleet.store.finality`` says why in that order)."""
        if not keys:
            return 0
        with self._transaction() as conn:
            mark_pending(conn, keys, now=datetime.now(UTC), insert=self.insert)
        return self.finalise_pending(keys)

    def finalise_pending(self, keys: Sequence[VerdictKey]) -> int:
        """See :meth:`VerdictStore.finalise_pending`."""
        if not keys:
            return 0
        with self._transaction() as conn:
            return finalise_pending(conn, keys)

    def _finalise_saved(self, records: Sequence[VerdictRecord]) -> None:
        """After a save committed: its provisional verdicts that a final job came for
        while they were judged are marked final now."""
        self.finalise_pending(list(dict.fromkeys(record.key for record in records
                                                 if record.provisional)))

    def iter_verdicts(
        self, *, metric: str | None = None, since: datetime | None = None,
        until: datetime | None = None, with_samples: bool = False,
        purposes: Collection[str] | None = None,
    ) -> Iterator[VerdictRecord]:
        """See :meth:`VerdictStore.iter_verdicts`; ``with_samples`` also reads each
        verdict's kept sample (``VerdictRecord.sample``)."""
        query = select(verdicts_table)
        if with_samples:
            query = select(verdicts_table, verdict_samples.c.sample).select_from(
                verdicts_table.outerjoin(
                    verdict_samples, verdict_samples.c.verdict_id == verdicts_table.c.id))
        query = query.order_by(verdicts_table.c.created_at, verdicts_table.c.id)
        if metric is not None:
            query = query.where(verdicts_table.c.metric == metric)
        if since is not None:
            query = query.where(verdicts_table.c.created_at >= to_utc(since))
        if until is not None:
            query = query.where(verdicts_table.c.created_at < to_utc(until))
        if purposes is not None:
            query = query.where(verdicts_table.c.purpose.in_(list(purposes)))
        with self._connection() as conn:
            result = conn.execution_options(yield_per=STREAM_BATCH_ROWS).execute(query)
            for row in result.mappings():
                yield _verdict_record(row)

    def iter_dead_letters(self, *, metric: str | None = None,
                          since: datetime | None = None) -> Iterator[DeadLetter]:
        """See :meth:`VerdictStore.iter_dead_letters`."""
        query = select(dead_letters_table).order_by(dead_letters_table.c.id)
        if metric is not None:
            query = query.where(dead_letters_table.c.metric == metric)
        if since is not None:
            query = query.where(dead_letters_table.c.created_at >= to_utc(since))
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
                   func.coalesce(func.sum(v.cost_usd), 0.0),
                   func.coalesce(func.sum(v.cached_tokens), 0))
            .where(v.created_at >= to_utc(since)).group_by(day, v.metric).order_by(day, v.metric)
        )
        with self._connection() as conn:
            return [
                DailyCost(day=_as_date(row[0]), metric=row[1], verdicts=row[2],
                          prompt_tokens=int(row[3]), completion_tokens=int(row[4]),
                          cost_usd=float(row[5]), cached_tokens=int(row[6]))
                for row in conn.execute(query)
            ]

    def judge_identities(self, *, since: datetime) -> list[JudgeIdentity]:
        """See :meth:`VerdictStore.judge_identities`."""
        with self._connection() as conn:
            return read_judge_identities(conn, since=since)

    def save_calibration(self, run: CalibrationRun) -> None:
        """See :meth:`VerdictStore.save_calibration`."""
        with self._transaction() as conn:
            conn.execute(calibration_runs.insert(), {
                "metric": run.metric, "prompt_version": run.prompt_version,
                "judge_model": run.judge_model, "gold": run.gold,
                "created_at": to_utc(run.created_at), "report": run.report})

    def calibration_runs(self, *, metric: str | None = None) -> list[CalibrationRun]:
        """See :meth:`VerdictStore.calibration_runs`."""
        with self._connection() as conn:
            return read_calibration_runs(conn, metric=metric)

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
def unavailable_as_store_error() -> Iterator[None]:
    """``OperationalError`` and ``InterfaceError`` (connection refused or lost, server
    shutting down, serialization failure, deadlock) become :class:`StoreUnavailable`: try
    again later. The one place SQLAlchemy's connection errors are mapped; the message
    names the driver's error class only (the full text quotes the statement's values)."""
    try:
        yield
    except (OperationalError, InterfaceError) as exc:
        raise StoreUnavailable(f"the database is unavailable: {type(exc.orig).__name__}") from exc


@contextmanager
def translate_errors() -> Iterator[None]:
    """Translate database errors into the two that the worker acts on.

    Unavailable is :func:`unavailable_as_store_error`. Every other database error
    (``DataError``, ``IntegrityError``...) and a ``ValueError`` raised adapting a value
    before the statement is sent (an encoding, an integer too long to write) are
    :class:`StoreRejected`: the same rows would be refused again. The message names the
    driver's error class and its first line only.
    """
    try:
        with unavailable_as_store_error():
            yield
    except DatabaseError as exc:
        first_line = storable_text(str(exc.orig).splitlines()[0] if str(exc.orig) else "")
        raise StoreRejected(f"the database refused a value: {type(exc.orig).__name__}: "
                            f"{first_line[:200]}") from exc
    except ValueError as exc:  # raised adapting a value: an encoding, an integer's size
        raise StoreRejected(f"the database refused a value: {type(exc).__name__}: "
                            f"{storable_text(str(exc))[:200]}") from exc


def storable_rows(
    verdicts: Sequence[VerdictRecord], dead_letters: Sequence[DeadLetter], *,
    on_rejected: RejectedVerdict | None,
) -> tuple[list[VerdictRecord], list[DeadLetter]]:
    """The rows to write: text made storable, and each verdict the database would refuse
    turned into ``on_rejected``'s dead letter (raised as :class:`StoreRejected` without it)."""
    records = [storable_verdict(record) for record in verdicts]
    letters = [storable_dead_letter(letter) for letter in dead_letters]
    refused = [(record, verdict_problem(record)) for record in records]
    letters += [_refused(record, column, on_rejected) for record, column in refused
                if column is not None]
    return [record for record, column in refused if column is None], letters


def _refused(record: VerdictRecord, column: str | None,
             on_rejected: RejectedVerdict | None) -> DeadLetter:
    error = StoreRejected(f"the database cannot hold this verdict's {column} (NUL, an "
                          "unpaired surrogate, too long or out of range)", field=column)
    if on_rejected is None:
        raise error
    return storable_dead_letter(on_rejected(record, error))


def _as_date(value: Any) -> date:
    return value if isinstance(value, date) else date.fromisoformat(str(value))


def json_default(value: Any) -> str:
    """A time inside a JSON parameter (``json.dumps(..., default=json_default)``): ISO 8601
    with its offset, which ``timestamptz`` reads back exactly; anything else is refused."""
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def to_utc(moment: datetime) -> datetime:
    """``moment`` in UTC; naive times (as SQLite returns them) are taken as UTC."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def _settled(conn: Connection, keys: Sequence[VerdictKey]) -> set[VerdictKey]:
    """The keys that already have a verdict or a dead letter."""
    # A key the database cannot hold has no verdict; its dead letter is found by digest.
    storable = [tuple(_key_tuple(key)) for key in keys if key_problem(key) is None]
    settled: set[VerdictKey] = set()
    if storable:
        found = conn.execute(select(*_KEY_COLUMNS).where(tuple_(*_KEY_COLUMNS).in_(storable)))
        settled = {VerdictKey(*row) for row in found}
    by_digest = {key.digest(): key for key in keys if key not in settled}
    if by_digest:
        settled.update(by_digest[digest] for digest in conn.execute(
            select(dead_letters_table.c.verdict_key)
            .where(dead_letters_table.c.verdict_key.in_(list(by_digest)))).scalars())
    return settled


def _key_tuple(key: VerdictKey) -> tuple[str, str, str, str]:
    return (key.sample_id, key.metric, key.prompt_version, key.judge_model)


def claim_state(key: VerdictKey, *, done: set[VerdictKey], taken: set[str],
                 held: dict[str, datetime], now: datetime, digest: str | None = None) -> Claim:
    """What claiming ``key`` came to (``digest``: its digest, when already computed)."""
    if key in done:
        return Claim(ClaimState.DONE)
    digest = digest or key.digest()
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


def read_judge_identities(conn: Connection, *, since: datetime, until: datetime | None = None,
                          metric: str | None = None,
                          on_sample_time: bool = False) -> list[JudgeIdentity]:
    """What the judge reported about itself on the verdicts created in ``[since, until)``,
    grouped (the store's, and beside a judge_drift suspicion).

    Args:
        conn: A connection to the store's database.
        since: Verdicts created since.
        until: And before; None for no end.
        metric: Only this metric's verdicts; None for all.
        on_sample_time: Select on the samples' time instead (an alert's window).
    """
    table = verdicts_table.c
    moment = table.sample_ts if on_sample_time else table.created_at
    first, last = func.min(table.created_at), func.max(table.created_at)
    query = (
        select(table.judge_model, table.judge_reported_model, table.judge_fingerprint,
               func.count(), first, last)
        .where(moment >= to_utc(since),
               (table.judge_reported_model.is_not(None))
               | (table.judge_fingerprint.is_not(None)))
        .group_by(table.judge_model, table.judge_reported_model, table.judge_fingerprint)
        .order_by(table.judge_model, first)
    )
    if until is not None:
        query = query.where(moment < to_utc(until))
    if on_sample_time:
        query = query.where(table.created_at >= created_since(to_utc(since)))
    if metric is not None:
        query = query.where(table.metric == metric)
    return [JudgeIdentity(judge_model=row[0], reported_model=row[1], fingerprint=row[2],
                          verdicts=row[3], first_at=to_utc(row[4]), last_at=to_utc(row[5]))
            for row in conn.execute(query)]


def read_judge_models(conn: Connection, *, metric: str, purpose: str, start: datetime,
                      end: datetime) -> set[str]:
    """The judge models of a metric's verdicts for ``purpose`` whose samples fall in
    ``[start, end)`` (which judge a judge_drift rule's canaries were asked of)."""
    table = verdicts_table.c
    query = (select(table.judge_model).distinct()
             .where(table.metric == metric, table.purpose == purpose,
                    table.sample_ts >= to_utc(start), table.sample_ts < to_utc(end),
                    table.created_at >= created_since(to_utc(start))))
    return set(conn.execute(query).scalars())


def read_calibration_runs(conn: Connection, *, metric: str | None = None,
                          limit: int | None = None) -> list[CalibrationRun]:
    """Calibration reports, newest first (the store's, and the judge_drift rule's baseline).

    Args:
        conn: A connection to the store's database.
        metric: Only this metric's; None for all.
        limit: Most reports read; None for all.
    """
    table = calibration_runs.c
    query = select(calibration_runs).order_by(table.created_at.desc(), table.id.desc())
    if metric is not None:
        query = query.where(table.metric == metric)
    if limit is not None:
        query = query.limit(limit)
    return [CalibrationRun(
        metric=row["metric"], prompt_version=row["prompt_version"],
        judge_model=row["judge_model"], gold=row["gold"],
        created_at=to_utc(row["created_at"]), report=row["report"],
    ) for row in conn.execute(query).mappings()]


def canary_rows(records: Sequence[VerdictRecord],
                new_ids: dict[VerdictKey, int]) -> list[dict[str, Any]]:
    """``verdict_scores`` rows of the new canary verdicts' agreement and bias series."""
    return [
        {"verdict_id": new_ids[record.key], "name": name, "metric": record.key.metric,
         "value": value, "sample_ts": to_utc(record.sample_ts),
         "created_at": to_utc(record.created_at)}
        for record in records if record.key in new_ids and record.purpose == "canary"
        for name, value in record.canary_scores.items()
    ]


def sample_rows(records: Sequence[VerdictRecord],
                 new_ids: dict[VerdictKey, int]) -> list[dict[str, Any]]:
    """``verdict_samples`` rows of the new verdicts that carry their sample."""
    return [
        {"verdict_id": new_ids[record.key], "created_at": to_utc(record.created_at),
         "sample": record.sample}
        for record in records if record.sample is not None and record.key in new_ids
    ]


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
        "notes": record.notes or None, "judge_reported_model": record.judge_reported_model,
        "judge_fingerprint": record.judge_fingerprint, "purpose": record.purpose,
        "judge_mode": record.judge_mode, "cached_tokens": record.cached_tokens,
        "compaction": record.compaction, "failed_step": record.failed_step,
        "cascade": record.cascade, "provisional": record.provisional,
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
        notes=row["notes"] or [], judge_reported_model=row["judge_reported_model"],
        judge_fingerprint=row["judge_fingerprint"], purpose=row["purpose"],
        judge_mode=row["judge_mode"], cached_tokens=row["cached_tokens"],
        compaction=row.get("compaction"), failed_step=row.get("failed_step"),
        sample=row.get("sample"), cascade=row.get("cascade"),
        provisional=bool(row.get("provisional")),
    )
