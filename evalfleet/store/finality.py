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
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import tuple_, update
from sqlalchemy.engine import Connection

from evalfleet.store.base import VerdictKey
from evalfleet.store.schema import verdict_scores, verdicts

_KEY = (verdicts.c.sample_id, verdicts.c.metric, verdicts.c.prompt_version,
        verdicts.c.judge_model)


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
    wanted = [(k.sample_id, k.metric, k.prompt_version, k.judge_model) for k in keys]
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
