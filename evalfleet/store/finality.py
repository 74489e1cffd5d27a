"""Session versions made final: the mark on their verdicts, and the scores it releases.

A session version closed when idle may still be replaced by the next version (a late
turn), so its verdict is stored *provisional*: its scores stay in the verdict (the page,
the export and the review queue show it) and are not written to ``verdict_scores``, the
series alerts (through the rollups that triggers keep from it) and corrected estimates
read. When the producer sends the same turns again once the final wait passed (or an end
marker closes the session with nothing new), the version's key is the same, so there is
no second verdict: the worker finds the verdict and calls :func:`finalise`, which clears
the mark and writes the score rows then. The rollup triggers count those rows as any
other, in the same transaction, so a rollup never holds a provisional score.

The update takes each row once (``WHERE provisional``: of two workers finalising the
same verdict at once, the second finds it final already and writes nothing).
Postgres and SQLite alike.

A final job may come before the verdict it marks is stored: a Batch API holds the key
(spooled, or sent and not yet collected), or the job was published only to mark
(``Job.finalise_only``: its judging shed by backpressure or a budget) while the idle
version's job still waits in the queue. Its key is then written to ``pending_finals``
(:func:`mark_pending`, committed first), and whoever saves a provisional verdict checks
that table after its save commits (:func:`finalise_pending`). Each side commits before
it reads the other's write, so of a final job and a save running at once at least one
sees the other (the final job's second look finds the verdict, or the save's look
finds the pending key): never both missed. A save killed between its commit and its
look leaves its job unacknowledged; the copy delivered again finds the verdict stored
and looks again (``workers.evaluation``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, exists, select, tuple_, update
from sqlalchemy.engine import Connection

from evalfleet.store.base import VerdictKey
from evalfleet.store.schema import pending_finals, verdict_scores, verdicts

_KEY = (verdicts.c.sample_id, verdicts.c.metric, verdicts.c.prompt_version,
        verdicts.c.judge_model)
_PENDING_KEY = (pending_finals.c.sample_id, pending_finals.c.metric,
                pending_finals.c.prompt_version, pending_finals.c.judge_model)


def _tuples(keys: Sequence[VerdictKey]) -> list[tuple[str, str, str, str]]:
    return [(k.sample_id, k.metric, k.prompt_version, k.judge_model) for k in keys]


def finalise(conn: Connection, keys: Sequence[VerdictKey]) -> int:
    """Mark the provisional verdicts of ``keys`` final and write their score rows.

    Args:
        conn: A connection in the transaction to do it in.
        keys: Verdict keys; those with no verdict, or a final one, are left alone.

    Returns:
        How many verdicts were marked final now.
    """
    if not keys:
        return 0
    v = verdicts.c
    wanted = _tuples(keys)
    marked = conn.execute(
        update(verdicts).where(tuple_(*_KEY).in_(wanted), v.provisional)
        .values(provisional=False)
        .returning(v.id, v.metric, v.purpose, v.scores, v.sample_ts, v.created_at)).all()
    rows = [{"verdict_id": row.id, "name": name, "metric": row.metric, "value": value,
             "sample_ts": row.sample_ts, "created_at": row.created_at}
            for row in marked if row.purpose == "production"
            for name, value in (row.scores or {}).items()
            if isinstance(value, int | float) and not isinstance(value, bool)]
    if rows:
        conn.execute(verdict_scores.insert(), rows)
    return len(marked)


def mark_pending(conn: Connection, keys: Sequence[VerdictKey], *, now: datetime,
                 insert: Any) -> None:
    """Note ``keys`` as final before their verdicts are stored (a key noted already stays).

    Args:
        conn: A connection in a transaction of its own: it must commit before the
            caller looks for the verdicts (:func:`finalise_pending`).
        keys: Verdict keys.
        now: The time noted.
        insert: The store's dialect INSERT (``SqlStore.insert``).
    """
    if keys:
        conn.execute(insert(pending_finals).on_conflict_do_nothing(),
                     [{"sample_id": k.sample_id, "metric": k.metric,
                       "prompt_version": k.prompt_version, "judge_model": k.judge_model,
                       "created_at": now} for k in keys])


def finalise_pending(conn: Connection, keys: Sequence[VerdictKey]) -> int:
    """Mark final the verdicts of those ``keys`` that are pending final, and forget the
    pending keys that have a verdict now (a pending key without one stays).

    Args:
        conn: A connection in the transaction to do it in (after the verdicts' save,
            or the pending mark, committed).
        keys: Verdict keys.

    Returns:
        How many verdicts were marked final now.
    """
    if not keys:
        return 0
    found = [VerdictKey(*row) for row in conn.execute(
        select(*_PENDING_KEY).where(tuple_(*_PENDING_KEY).in_(_tuples(keys)))
        .where(exists().where(tuple_(*_KEY) == tuple_(*_PENDING_KEY))))]
    if not found:
        return 0
    marked = finalise(conn, found)
    conn.execute(delete(pending_finals).where(tuple_(*_PENDING_KEY).in_(_tuples(found))))
    return marked
