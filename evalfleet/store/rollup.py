"""Rollups of the score series: what the alert engine sums, kept per bucket of sample time.

``score_rollups`` holds, per metric, score name, bucket (a minute and an hour of sample
time, aligned to the epoch), segment attributes (the verdict's whole ``attributes``),
the verdict's judge model and prompt version, and level, the count, sum, sum of squares
and earliest sample time of the ``verdict_scores`` rows that fall in it. Those add up
across buckets and segments to every statistic the engine tests (Welch and one-sample t
from count, sum and sum of squares; proportions from the sum of a 0/1 score;
Mann-Whitney from the counts per level), so a window or a baseline costs its buckets
and segments, never its samples.

**Levels.** A value on the grid of multiples of 1/:data:`LEVEL_GRID` within [-1, 1]
(every binary score, every normalised integer scale of up to eleven points, a canary's
bias) gets a row per level, so an ordinal score's counts per level are exact. Every
other value goes, in a minute bucket, to the row of its tenth of 0..1
(:data:`HISTOGRAM_BINS`, :func:`binned_level`; revision 0026), and in an hour bucket
(or when null) to one row marked :data:`OFF_GRID`: a continuous score costs a few rows
per minute and one per hour, whatever its traffic. The alert page draws a window's
histogram from the minute rows, and picks the minutes that can hold its worst samples
from them, instead of reading every score row of the window
(``store.queries.evidence``).

**The verdict's own columns.** ``judge_model`` and ``prompt_version`` (revision 0024)
let an incident's ``explain_by`` split a window by them from the rollups
(``alerts.window.fetch_explained``) instead of reading the window's score rows joined to
their verdicts, which at 1,000 samples a minute over 100 apps took seconds a cycle for
a head that is the whole traffic. They are columns of the key, not folded into
``segment_key``: that key is the md5 of the attributes alone, the key of the verdicts'
segment index (revision 0023), through which the page and the evidence read a
segment's verdicts by the attribute sets the rollups name
(``store.evidence.segment_keys``); a hash of attributes and judge together would name
no index range. As columns they are grouped by name, not extracted from JSON. A
segment judged by one model under one prompt has one row per bucket and level as
before; during a rollout of a second model or prompt, two.

**Where they are kept, and why.** Triggers on ``verdict_scores`` add a statement's new
rows and subtract its deleted ones, in the transaction that writes them (Postgres: one
statement-level trigger per change with its transition table, each new score's verdict
found by its key's index; SQLite: one per row). So
a rollup is exactly its rows at every commit: a verdict landing late goes to its sample
time's bucket, a verdict stored once is counted once (the insert that refuses a second
copy adds no score row), concurrent writers add under the row lock of ``ON CONFLICT``
(rows taken in key order, so two savers never deadlock on them), and a crash or a
restart mid-save rolls the rollups back with the scores. Maintaining them from a
high-water mark in ``beat`` was the alternative: scores commit out of the order of any
column they carry (a worker's batch commits after a later one), so the mark would need
a settling delay or the transaction horizon, and the engine would read rollups that lag
the verdicts; a trigger costs the worker nothing (it runs in the database, on the one
statement that stores a batch) and the worker's save path stays as it is.

What a trigger does not see, the store does itself: dropping a day's partitions
subtracts their rows first (:func:`subtract_partition`), and ``evalfleet purge``
deletes scores before their verdicts (the trigger reads the attributes from the
verdict). :func:`rebuild` computes every rollup again from the score rows.

**Shards.** Every save of a busy segment adds to the same minute and hour rows, and a
row's lock is held from the trigger to the commit: eight writer processes saving one
app's verdicts spent about twice as long per save with the triggers on as with each
writer on an app of its own (``bench/alert_cycle_rollups.py --contention``). On
Postgres a save therefore adds to the rows of its connection's shard
(``mod(pg_backend_pid(), SHARDS)``), so writers on different connections rarely share a
row; a read sums the shards like any other rows. Removals go to shard 0 (a shard row
may go below zero while its samples' additions sit in another shard; the sum stays
exact), and a row is dropped once it is empty and alone. :func:`fold`, run by
``evalfleet beat`` every alert tick, moves the shards of buckets that are over into
shard 0, so a read meets one row per bucket and segment except in the last minutes.
SQLite has one writer at a time: its saves all go to shard 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache

from sqlalchemy import text
from sqlalchemy.engine import Connection

#: The buckets kept, in seconds: minutes for the edges of a window, hours for the rest.
BUCKET_SPANS_S = (60, 3600)

#: Levels are counted on the grid of multiples of 1/LEVEL_GRID (the least common multiple
#: of 1 to 10: every integer scale of up to eleven points, normalised, lies on it).
LEVEL_GRID = 2520

#: The level of every value off the grid (or null) in an hour bucket: summed, not
#: counted per level.
OFF_GRID = -999_999

#: Off-grid values of a minute bucket are counted per tenth of 0..1 (below 0 with the
#: first, 1 and above with the last, as the alert page's histogram bins them), at the
#: levels just under :data:`OFF_GRID` (:func:`binned_level`).
HISTOGRAM_BINS = 10

#: Rows a bucket of one segment and level is spread over on Postgres, one per group of
#: saving connections (``mod(pg_backend_pid(), SHARDS)``); 0 also takes removals and folds.
SHARDS = 8

#: How long after a bucket ends its shards are folded into one row, in seconds: a
#: verdict's save takes well under this, so the fold seldom meets a bucket being written.
FOLD_AFTER_S = 120

#: The verdict's own columns in the key, each the same-named column of ``verdicts``
#: (revision 0024; the triggers and the fill of earlier revisions are made without them).
VERDICT_COLUMNS = ("judge_model", "prompt_version")


def binned_level(index: int) -> int:
    """The level of the off-grid values of a minute bucket in bin ``index`` (0 to
    ``HISTOGRAM_BINS - 1``)."""
    return OFF_GRID - 1 - index


def level_bin(level: int) -> int | None:
    """The histogram bin of a rollup row's values, or None when the row does not say
    (:data:`OFF_GRID`: an hour's off-grid or null values).

    On the grid, the level's value binned as the alert page bins a value; off it, the
    bin the row was kept for.
    """
    if level == OFF_GRID:
        return None
    if level < OFF_GRID:
        return OFF_GRID - 1 - level
    return value_bin(level / LEVEL_GRID)


def value_bin(value: float) -> int:
    """The histogram bin of a score: its tenth of 0..1, below 0 in the first and 1 and
    above in the last (what the minute rows' levels hold)."""
    return min(HISTOGRAM_BINS - 1, max(0, int(value * HISTOGRAM_BINS)))


def _level(dialect: str, *, binned: bool) -> str:
    """A score row ``s``'s level in a bucket of ``spans.span_s`` (before revision 0026:
    ``binned`` False, every off-grid value at :data:`OFF_GRID`)."""
    on_grid = (f"WHEN abs(s.value) <= 1 AND round(s.value * {LEVEL_GRID}) / {LEVEL_GRID}"
               f" = s.value THEN CAST(round(s.value * {LEVEL_GRID}) AS integer)")
    by_bin = (f" WHEN s.value IS NOT NULL AND spans.span_s = {BUCKET_SPANS_S[0]}"
              f" THEN {binned_level(0)} - CAST({_DIALECT[dialect]['bin']} AS integer)"
              if binned else "")
    return f"CASE {on_grid}{by_bin} ELSE {OFF_GRID} END"


#: Per dialect: the bucket of ``s.sample_ts`` for ``spans.span_s``, the segment key of
#: ``v.attributes``, the spans as a row source, the smaller of two times, and the shard
#: a save adds to.
_DIALECT = {
    "postgresql": {
        "shard": f"mod(pg_backend_pid(), {SHARDS})",  # no %: the driver reads it
        "bucket": "to_timestamp(floor(extract(epoch FROM s.sample_ts) / spans.span_s)"
                  " * spans.span_s)",
        "segment_key": "md5(CAST(v.attributes AS text))",
        "spans": "(VALUES " + ", ".join(f"({span})" for span in BUCKET_SPANS_S) + ")"
                 " AS spans(span_s)",
        "least": "least",
        "bin": f"least({HISTOGRAM_BINS - 1}, greatest(0, floor(s.value * {HISTOGRAM_BINS})))",
    },
    # Times are stored as UTC text 'YYYY-MM-DD HH:MM:SS.ffffff'.
    "sqlite": {
        "bucket": "CASE spans.span_s WHEN 60 THEN substr(s.sample_ts, 1, 16) || ':00.000000'"
                  " ELSE substr(s.sample_ts, 1, 13) || ':00:00.000000' END",
        "segment_key": "v.attributes",
        "spans": "(" + " UNION ALL ".join(f"SELECT {span} AS span_s"
                                          for span in BUCKET_SPANS_S) + ") AS spans",
        "least": "min",
        "shard": "0",
        # Truncation, not floor: the same for every value the bin keeps (below 0: bin 0).
        "bin": f"min({HISTOGRAM_BINS - 1}, max(0, CAST(s.value * {HISTOGRAM_BINS} AS integer)))",
    },
}


@dataclass(frozen=True)
class _Templates:
    """The statements' text for a key with the verdict columns ``own``; ``{...}`` fields
    are filled per use."""

    key: str
    aggregate: str
    add: str
    subtract: str
    drop_empty: str
    fold: str


@cache
def _templates(own: tuple[str, ...]) -> _Templates:
    key = ", ".join(["metric", "name", "span_s", "bucket", "segment_key", *own, "level"])
    row_key = f"{key}, shard"
    columns = f"{row_key}, attributes, n, total, total_sq, first_ts"
    key_of = {alias: ", ".join(f"{alias}.{c.strip()}" for c in key.split(","))
              for alias in ("score_rollups", "o")}
    row_key_of = {alias: f"{key_of[alias]}, {alias}.shard" for alias in key_of}
    own_select = "".join(f"v.{c} AS {c}, " for c in own)
    own_group = "".join(f", v.{c}" for c in own)
    return _Templates(
        key=key,
        # Rollup rows of the score rows in ``{scores}`` (joined to their verdicts on
        # ``{join}``).
        aggregate=f"""
SELECT s.metric AS metric, s.name AS name, spans.span_s AS span_s, {{bucket}} AS bucket,
       {{segment_key}} AS segment_key, {own_select}{{level}} AS level, {{shard}} AS shard,
       v.attributes AS attributes,
       count(*) AS n, coalesce(sum(s.value), 0) AS total,
       coalesce(sum(s.value * s.value), 0) AS total_sq, min(s.sample_ts) AS first_ts
FROM {{scores}} AS s JOIN {{verdicts}} AS v ON {{join}} CROSS JOIN {{spans}}
GROUP BY s.metric, s.name, spans.span_s, {{bucket}}, v.attributes{own_group}, {{level}}
""",
        add=f"""
INSERT INTO score_rollups ({columns})
SELECT {columns} FROM ({{aggregate}}) AS g WHERE true ORDER BY {row_key}
ON CONFLICT ({row_key}) DO UPDATE SET n = score_rollups.n + excluded.n,
    total = score_rollups.total + excluded.total,
    total_sq = score_rollups.total_sq + excluded.total_sq,
    first_ts = {{least}}(score_rollups.first_ts, excluded.first_ts)
""",
        # Removed scores go to shard 0 as negative sums (their additions may sit in any
        # shard).
        subtract=f"""
INSERT INTO score_rollups ({columns})
SELECT {key}, 0, attributes, -n, -total, -total_sq, first_ts FROM ({{aggregate}}) AS g
WHERE true ORDER BY {key}
ON CONFLICT ({row_key}) DO UPDATE SET n = score_rollups.n + excluded.n,
    total = score_rollups.total + excluded.total,
    total_sq = score_rollups.total_sq + excluded.total_sq
""",
        # A shard-0 row left empty goes when no other shard of its key holds anything:
        # alone, no sample left means nothing left (its sums are then rounding). (No
        # alias for the deleted table: SQLite's triggers take none.)
        drop_empty=f"""
DELETE FROM score_rollups WHERE shard = 0 AND n = 0
    AND ({key}) IN (SELECT {key} FROM ({{aggregate}}) AS g)
    AND NOT EXISTS (SELECT 1 FROM score_rollups o
                    WHERE ({key_of["o"]}) = ({key_of["score_rollups"]}) AND o.shard <> 0)
""",
        # Shard rows moved into shard 0 (Postgres), those matching ``{where}``. Every row
        # of their keys, shard 0 included, is locked first in key order, as a save's
        # trigger takes its rows: a late verdict saved into a bucket being folded then
        # waits for the fold (or the fold for it), and neither can hold a row the other
        # wants next (a delete alone takes rows in scan order, which can deadlock with
        # such a save). A row a writer updates meanwhile is moved as it then is: the lock
        # waits for its commit.
        fold=f"""
WITH locked AS (
    SELECT {row_key} FROM score_rollups WHERE {{where}} AND ({key}) IN (
        SELECT {key} FROM score_rollups WHERE shard <> 0 AND {{where}})
    ORDER BY {row_key} FOR UPDATE),
moved AS (
    DELETE FROM score_rollups USING locked o
    WHERE ({row_key_of["o"]}) = ({row_key_of["score_rollups"]}) AND o.shard <> 0
    RETURNING {key_of["score_rollups"]}, attributes, n, total, total_sq, first_ts)
INSERT INTO score_rollups ({columns})
SELECT {key}, 0, attributes, sum(n), sum(total), sum(total_sq), min(first_ts)
FROM moved GROUP BY {key}, attributes ORDER BY {key}
ON CONFLICT ({row_key}) DO UPDATE SET n = score_rollups.n + excluded.n,
    total = score_rollups.total + excluded.total,
    total_sq = score_rollups.total_sq + excluded.total_sq,
    first_ts = least(score_rollups.first_ts, excluded.first_ts)
""")


#: Buckets that ended before ``:settled`` (the first bound is the partial index's range).
_SETTLED = ("bucket < CAST(:settled AS timestamptz)"
            " AND bucket < CAST(:settled AS timestamptz) - span_s * interval '1 second'")

#: The verdict of score row ``s`` (its ``{columns}``), as a lateral row source.
_VERDICT_OF_SCORE = ("LATERAL (SELECT {columns} FROM verdicts"
                     " WHERE verdicts.id = s.verdict_id AND verdicts.created_at = s.created_at"
                     " OFFSET 0)")

#: The score rows a SQLite row trigger sees, as a one-row source.
_SQLITE_ROW = ("(SELECT {row}.verdict_id AS verdict_id, {row}.metric AS metric,"
               " {row}.name AS name, {row}.value AS value, {row}.sample_ts AS sample_ts)")


def _aggregate(dialect: str, own: tuple[str, ...], *, scores: str, verdicts: str = "verdicts",
               join: str = "v.id = s.verdict_id", shard: str | None = None,
               binned: bool = True) -> str:
    parts = {**_DIALECT[dialect], **({"shard": shard} if shard is not None else {})}
    return _templates(own).aggregate.format(
        scores=scores, verdicts=verdicts, join=join, bucket=parts["bucket"],
        segment_key=parts["segment_key"], spans=parts["spans"], shard=parts["shard"],
        level=_level(dialect, binned=binned))


def _add(dialect: str, own: tuple[str, ...], aggregate: str) -> str:
    return _templates(own).add.format(aggregate=aggregate, least=_DIALECT[dialect]["least"])


def _subtract(dialect: str, own: tuple[str, ...], aggregate: str) -> list[str]:
    """Removal: negative sums into shard 0, the keys' other shards folded in (Postgres),
    then the rows left empty dropped, so a purged day leaves no row behind."""
    sql = _templates(own)
    fold_keys = sql.fold.format(where=f"({sql.key}) IN (SELECT {sql.key} FROM ({aggregate}) AS g)")
    return [sql.subtract.format(aggregate=aggregate),
            *([fold_keys] if dialect == "postgresql" else []),
            sql.drop_empty.format(aggregate=aggregate)]


def fold(conn: Connection, *, now: datetime) -> int:
    """Move the shard rows of every bucket over for :data:`FOLD_AFTER_S` into shard 0
    (Postgres; SQLite keeps one shard). Run by ``evalfleet beat`` before each alert
    cycle, so the cycle reads one row per bucket and segment.

    Args:
        conn: A connection in a transaction of its own (it holds the moved rows' locks).
        now: The present.

    Returns:
        How many shard-0 rows the fold wrote.
    """
    if conn.dialect.name != "postgresql":
        return 0
    moved = conn.execute(text(_templates(VERDICT_COLUMNS).fold.format(where=_SETTLED)),
                         {"settled": now - timedelta(seconds=FOLD_AFTER_S)})
    return int(moved.rowcount or 0)


def trigger_statements(dialect: str, *, verdict_columns: tuple[str, ...] = VERDICT_COLUMNS,
                       binned: bool = True) -> list[str]:
    """The DDL of the triggers that keep ``score_rollups`` (``migrations/versions/0021``,
    ``0024``, ``0025``, ``0026``).

    Args:
        dialect: ``postgresql`` or ``sqlite``.
        verdict_columns: The verdict's columns the table's key holds (revisions before
            0024: none).
        binned: Whether a minute's off-grid values are counted per histogram bin
            (revisions before 0026: not).
    """
    own = verdict_columns
    if dialect == "postgresql":
        # New scores look up their verdict by its whole key, one index probe a score row
        # (the partition is found at once): a plain join let the planner hash the new
        # rows and scan every partition of ``verdicts`` whole, its plan made once per
        # session and kept while the tables grew (the fence, ``OFFSET 0``, keeps the
        # lookup a lookup). Deleted ones by id, as scores stored before partitioning
        # carry another time.
        add = _add(dialect, own, _aggregate(
            dialect, own, scores="changed", verdicts=_VERDICT_OF_SCORE.format(
                columns=", ".join(["attributes", *own])), join="true", binned=binned))
        subtract = ";\n".join(_subtract(dialect, own, _aggregate(
            dialect, own, scores="changed", binned=binned)))
        return [
            _pg_function("score_rollups_add", add),
            _pg_function("score_rollups_subtract", subtract),
            "CREATE TRIGGER score_rollups_add AFTER INSERT ON verdict_scores"
            " REFERENCING NEW TABLE AS changed FOR EACH STATEMENT"
            " EXECUTE FUNCTION score_rollups_add()",
            "CREATE TRIGGER score_rollups_subtract AFTER DELETE ON verdict_scores"
            " REFERENCING OLD TABLE AS changed FOR EACH STATEMENT"
            " EXECUTE FUNCTION score_rollups_subtract()",
        ]
    added = _add(dialect, own, _aggregate(dialect, own, scores=_SQLITE_ROW.format(row="NEW"),
                                          binned=binned))
    removed = ";\n".join(_subtract(dialect, own, _aggregate(
        dialect, own, scores=_SQLITE_ROW.format(row="OLD"), binned=binned)))
    return [
        f"CREATE TRIGGER score_rollups_add AFTER INSERT ON verdict_scores BEGIN {added}; END",
        "CREATE TRIGGER score_rollups_subtract AFTER DELETE ON verdict_scores"
        f" BEGIN {removed}; END",
    ]


def drop_trigger_statements(dialect: str) -> list[str]:
    """The DDL that removes what :func:`trigger_statements` made."""
    statements = [f"DROP TRIGGER IF EXISTS {name}" + (" ON verdict_scores"
                                                      if dialect == "postgresql" else "")
                  for name in ("score_rollups_add", "score_rollups_subtract")]
    if dialect == "postgresql":
        statements += ["DROP FUNCTION IF EXISTS score_rollups_add()",
                       "DROP FUNCTION IF EXISTS score_rollups_subtract()"]
    return statements


def rebuild(conn: Connection, *, verdict_columns: tuple[str, ...] = VERDICT_COLUMNS,
            binned: bool = True) -> int:
    """Compute every rollup again from the score rows (the migration's first fill; a repair).

    Args:
        conn: A connection in a transaction.
        verdict_columns: As for :func:`trigger_statements`.
        binned: As for :func:`trigger_statements`.

    Returns:
        How many rollup rows there are now.
    """
    dialect = conn.dialect.name
    # Driver SQL: the statements hold colons (SQLite's times) that are not parameters.
    conn.exec_driver_sql("DELETE FROM score_rollups")
    own = verdict_columns
    conn.exec_driver_sql(_add(dialect, own, _aggregate(dialect, own, scores="verdict_scores",
                                                       shard="0", binned=binned)))
    return int(conn.exec_driver_sql("SELECT count(*) FROM score_rollups").scalar_one())


def subtract_partition(conn: Connection, suffix: str) -> None:
    """Take the score rows of one day's partitions out of the rollups, before they are
    dropped (a dropped table fires no trigger). Postgres only.

    Args:
        conn: A connection in the transaction that drops them.
        suffix: The partitions' suffix (``pYYYYMMDD``, ``legacy``), from the store's own list.
    """
    found = conn.exec_driver_sql(f"SELECT to_regclass('verdict_scores_{suffix}') IS NOT NULL"
                                 f" AND to_regclass('verdicts_{suffix}') IS NOT NULL")
    if not found.scalar_one():
        return
    aggregate = _aggregate("postgresql", VERDICT_COLUMNS, scores=f"verdict_scores_{suffix}",
                           verdicts=f"verdicts_{suffix}")
    for statement in _subtract("postgresql", VERDICT_COLUMNS, aggregate):
        conn.exec_driver_sql(statement)


def _pg_function(name: str, body: str) -> str:
    return (f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $body$\n"
            f"BEGIN\n{body};\nRETURN NULL;\nEND\n$body$")
