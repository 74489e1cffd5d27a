"""The alert engine's reads of a score's window (``evalfleet.alerts.window`` asks them).

Plain data in and out: metric, score, attribute names and values, ranges of sample time;
sums per group. Whole minutes and hours are read from ``score_rollups``
(``evalfleet.store.rollup``), the partial minutes at a window's ends from the score
rows joined to their verdicts.

On Postgres each read is one query aggregated at every level of the rule's segments at
once (``GROUPING SETS``); the score rows are range-scanned on their (metric, name,
sample_ts) index and joined to ``verdicts`` for the segment attributes, both bounded on
their partition key, and JIT is off for the transaction (a long range's row estimate
passes ``jit_above_cost`` and compiling costs seconds, docs/operating.md). On the
embedded SQLite store (no ``GROUPING SETS``, no JSON containment) the rows are returned
and the caller sums them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import and_, or_, select, text
from sqlalchemy.engine import Connection, RowMapping

from evalfleet.store.dialect import is_sqlite, jit_off
from evalfleet.store.partitions import created_since
from evalfleet.store.queries.evidence import attributes_match
from evalfleet.store.rollup import LEVEL_GRID, OFF_GRID, VERDICT_COLUMNS
from evalfleet.store.schema import alert_exclusions, score_rollups, verdict_scores, verdicts
from evalfleet.store.sql import to_utc

#: A connection to the store's database, as the alert engine holds it (opaque to it).
StoreConnection = Connection

#: A stretch of sample time, ``[low, high)``.
Range = tuple[datetime, datetime]

#: What a window is split by: a name, and the verdict column it is read from (None: the
#: sample attribute of that name).
Explainer = tuple[str, str | None]


class NotInRollups(ValueError):
    """A verdict column the rollups' key does not hold (``rollup.VERDICT_COLUMNS``)."""


@dataclass(frozen=True)
class Sums:
    """Count, sum, sum of squares and earliest sample time of some score rows."""

    n: int
    total: float
    total_sq: float
    first_ts: datetime | None

    def plus(self, other: Sums) -> Sums:
        """Both sets of rows together."""
        firsts = [t for t in (self.first_ts, other.first_ts) if t is not None]
        return Sums(self.n + other.n, self.total + other.total,
                    self.total_sq + other.total_sq, min(firsts) if firsts else None)


@dataclass(frozen=True)
class ExplainedSums:
    """The sums of the samples with one value of one explainer and one set of key values."""

    explainer: int
    """Which explainer (its index in the request)."""
    keys: tuple[str | None, ...]
    """The samples' values of the segment keys (None: a sample without the attribute)."""
    value: str
    """The explainer's value."""
    sums: Sums
    """Their sums."""


class WindowAsk(Protocol):
    """What a window read asks (``alerts.window.WindowQuery`` is one)."""

    @property
    def metric(self) -> str: ...
    @property
    def score(self) -> str: ...
    @property
    def keys(self) -> tuple[str, ...]: ...
    @property
    def filters(self) -> tuple[tuple[str, tuple[str, ...]], ...]: ...
    @property
    def with_levels(self) -> bool: ...
    @property
    def exclude_rule(self) -> str | None: ...
    @property
    def exclusion_cap(self) -> timedelta | None: ...


@dataclass(frozen=True)
class GroupSums:
    """The sums of one segment (and level) of a window, as the database grouped them."""

    values: tuple[str, ...]
    """The segment's values of the first keys (fewer than the keys: a level above)."""
    level: float | None
    """The samples' value (levels asked for); None off the rollups' level grid."""
    sums: Sums
    """Their sums."""


@dataclass(frozen=True)
class ScoredRow:
    """One score row of a window with its verdict's attributes (the embedded store)."""

    value: float
    """The score."""
    ts: datetime
    """Its sample time (UTC)."""
    attributes: dict[str, Any]
    """Its verdict's attributes."""


@dataclass(frozen=True)
class RollupRow:
    """One rollup row of a window (the embedded store)."""

    bucket: datetime
    """The bucket's start (UTC)."""
    attributes: dict[str, Any]
    """The attributes of its samples."""
    level: float | None
    """Its value on the level grid; None off it."""
    sums: Sums


def embedded(conn: StoreConnection) -> bool:
    """True on the embedded SQLite store: no ``GROUPING SETS``, no JSON containment, so
    the window's rows are summed by the caller (:func:`score_rows`, :func:`rollup_rows`)."""
    return is_sqlite(conn)


def exclusions(conn: StoreConnection, *,
               rule: str) -> list[tuple[dict[str, str], datetime, datetime | None]]:
    """The periods ``rule`` left out of its baselines: segment labels, start, end (None:
    still open)."""
    x = alert_exclusions.c
    return [(dict(segment), to_utc(started), to_utc(ended) if ended is not None else None)
            for segment, started, ended in conn.execute(
                select(x.segment, x.started_at, x.ended_at).where(x.rule == rule))]


def grouped_score_sums(conn: StoreConnection, ask: WindowAsk, *,
                       ranges: Sequence[Range]) -> list[GroupSums]:
    """Sums of the score rows in ``ranges`` at every level of the keys (and per value with
    levels), the exclusions of ``ask`` applied (Postgres: one ``GROUPING SETS`` query).
    Samples without a key's attribute count only at the levels above it."""
    if not ranges:
        return []
    jit_off(conn)
    sql, params = _build(ask, ranges)
    return _grouped(ask, conn.execute(text(sql), params).mappings(),
                    level_of=lambda level: None if level is None else float(level))


def grouped_rollup_sums(conn: StoreConnection, ask: WindowAsk, *,
                        buckets: Mapping[int, Sequence[Range]]) -> list[GroupSums]:
    """As :func:`grouped_score_sums`, over the rollup rows of ``buckets`` (per span in
    seconds, ranges of whole buckets; a bucket's start decides its exclusion)."""
    if not any(buckets.values()):
        return []
    jit_off(conn)
    sql, params = _build_rolled(ask, buckets)
    return _grouped(ask, conn.execute(text(sql), params).mappings(), level_of=_level_value)


def score_rows(conn: StoreConnection, ask: WindowAsk, *,
               ranges: Sequence[Range]) -> list[ScoredRow]:
    """The score rows in ``ranges`` passing the filters, with their verdicts' attributes
    (the embedded store; exclusions are the caller's)."""
    if not ranges:
        return []
    vs = verdict_scores.c
    rows = conn.execute(
        select(vs.value, vs.sample_ts, verdicts.c.attributes)
        .select_from(verdict_scores.join(verdicts, verdicts.c.id == vs.verdict_id))
        .where(vs.metric == ask.metric, vs.name == ask.score,
               or_(*(and_(vs.sample_ts >= to_utc(low), vs.sample_ts < to_utc(high))
                     for low, high in ranges)),
               *attributes_match({}, dict(ask.filters))),
    ).all()
    return [ScoredRow(float(value), to_utc(ts), attributes or {})
            for value, ts, attributes in rows]


def rollup_rows(conn: StoreConnection, ask: WindowAsk, *,
                buckets: Mapping[int, Sequence[Range]]) -> list[RollupRow]:
    """The rollup rows of ``buckets`` (the embedded store; filters and exclusions are the
    caller's)."""
    if not any(buckets.values()):
        return []
    r = score_rollups.c
    rows = conn.execute(
        select(r.bucket, r.attributes, r.level, r.n, r.total, r.total_sq, r.first_ts)
        .where(r.metric == ask.metric, r.name == ask.score, or_(*(
            and_(r.span_s == span, r.bucket >= to_utc(low), r.bucket < to_utc(high))
            for span, ranges in buckets.items() for low, high in ranges))),
    ).all()
    return [RollupRow(to_utc(bucket), attributes or {}, _level_value(level),
                      Sums(int(n), float(total), float(total_sq), to_utc(first)))
            for bucket, attributes, level, n, total, total_sq, first in rows]


def _level_value(level: int | None) -> float | None:
    return None if level is None or level == OFF_GRID else level / LEVEL_GRID


def _grouped(ask: WindowAsk, rows: Iterable[RowMapping],
             level_of: Callable[[Any], float | None]) -> list[GroupSums]:
    found = []
    for row in rows:
        depth = len(ask.keys) - bin(row["grouping_mask"]).count("1")
        values = [row[f"s{i}"] for i in range(depth)]
        # The empty grouping set yields a row even without samples; missing attributes
        # group as NULL and belong only to the levels above.
        if not row["n"] or any(value is None for value in values):
            continue
        first = row["first_ts"]
        found.append(GroupSums(
            tuple(str(value) for value in values),
            level_of(row["level_key"]) if ask.with_levels else None,
            Sums(int(row["n"]), float(row["total"] or 0.0), float(row["total_sq"] or 0.0),
                 to_utc(first) if first is not None else None)))
    return found


def _conditions(ask: WindowAsk, params: dict[str, Any], *, alias: str,
                moment: str) -> list[str]:
    """The filters and the exclusion test on ``{alias}.attributes`` at time ``moment``."""
    conditions = []
    for i, (key, values) in enumerate(ask.filters):
        params[f"f{i}"], params[f"fv{i}"] = key, list(values)
        conditions.append(f"({alias}.attributes ->> :f{i}) = ANY(:fv{i})")
    if ask.exclude_rule is not None:
        params["rule"] = ask.exclude_rule
        capped = ""
        if ask.exclusion_cap is not None:
            params["cap"] = ask.exclusion_cap
            capped = f" AND {moment} < x.started_at + :cap"
        conditions.append(
            "NOT EXISTS (SELECT 1 FROM alert_exclusions x WHERE x.rule = :rule"
            f" AND {alias}.attributes @> x.segment AND {moment} >= x.started_at"
            f" AND (x.ended_at IS NULL OR {moment} < x.ended_at){capped})",
        )
    return conditions


def _grouping(ask: WindowAsk, inner: str) -> str:
    """The outer aggregation of ``inner`` at every level of the keys (``GROUPING SETS``)."""
    names = [f"s{i}" for i in range(len(ask.keys))]
    level = ["level_key"] if ask.with_levels else []
    sets = ", ".join(
        "(" + ", ".join(level + names[:depth]) + ")" for depth in range(len(names) + 1)
    )
    mask = f"GROUPING({', '.join(names)})" if names else "0"
    outer_columns = ", ".join([f"{mask} AS grouping_mask", *names, *level])
    return (f"SELECT {outer_columns}, sum(n) AS n, sum(total) AS total,"
            f" sum(total_sq) AS total_sq, min(first_ts) AS first_ts FROM ({inner}) AS scored"
            f" GROUP BY GROUPING SETS ({sets})")


def _key_columns(keys: Sequence[str], params: dict[str, Any], *, alias: str) -> list[str]:
    columns = []
    for i, key in enumerate(keys):
        params[f"k{i}"] = key
        columns.append(f"{alias}.attributes ->> :k{i} AS s{i}")
    return columns


def _build(ask: WindowAsk, ranges: Sequence[Range]) -> tuple[str, dict[str, Any]]:
    """The score rows' query (Postgres) over ``ranges`` of sample time."""
    params: dict[str, Any] = {"metric": ask.metric, "score": ask.score,
                              "created_since": created_since(min(low for low, _ in ranges))}
    conditions = [
        "vs.metric = :metric", "vs.name = :score",
        ranges_sql("vs.sample_ts", ranges, params, prefix="t"),
        # The partition key, so only the window's partitions are read.
        "vs.created_at >= :created_since", "v.created_at >= :created_since",
        *_conditions(ask, params, alias="v", moment="vs.sample_ts"),
    ]
    columns = ["1 AS n", "vs.value AS total", "vs.value * vs.value AS total_sq",
               "vs.sample_ts AS first_ts", "vs.value AS level_key",
               *_key_columns(ask.keys, params, alias="v")]
    inner = (f"SELECT {', '.join(columns)}"
             " FROM verdict_scores vs JOIN verdicts v ON v.id = vs.verdict_id"
             f" WHERE {' AND '.join(conditions)}")
    return _grouping(ask, inner), params


def _build_rolled(ask: WindowAsk,
                  buckets: Mapping[int, Sequence[Range]]) -> tuple[str, dict[str, Any]]:
    """The rollups' query (Postgres) over whole buckets."""
    params: dict[str, Any] = {"metric": ask.metric, "score": ask.score}
    conditions = ["r.metric = :metric", "r.name = :score", _spans_sql(buckets, params),
                  *_conditions(ask, params, alias="r", moment="r.bucket")]
    columns = ["r.n AS n", "r.total AS total", "r.total_sq AS total_sq",
               "r.first_ts AS first_ts", "r.level AS level_key",
               *_key_columns(ask.keys, params, alias="r")]
    inner = (f"SELECT {', '.join(columns)} FROM score_rollups r"
             f" WHERE {' AND '.join(conditions)}")
    return _grouping(ask, inner), params


def _spans_sql(buckets: Mapping[int, Sequence[Range]], params: dict[str, Any]) -> str:
    """The rollup rows of ``buckets``: each span's ranges of ``r.bucket``."""
    spans = []
    for span, ranges in buckets.items():
        if ranges:
            params[f"span{span}"] = span
            spans.append(ranges_sql("r.bucket", ranges, params, prefix=f"b{span}_",
                                    extra=f"r.span_s = :span{span} AND "))
    return "(" + " OR ".join(spans) + ")"


def explained_sums(
    conn: StoreConnection, *, metric: str, score: str, keys: Sequence[str],
    filters: Mapping[str, Sequence[str]], heads: Sequence[Mapping[str, str]],
    explain: Sequence[Explainer], buckets: Mapping[int, Sequence[Range]],
    ranges: Sequence[Range],
) -> list[ExplainedSums]:
    """The sums of a window's samples under ``heads``, per key values and per value of
    each explainer in turn: ``buckets`` (per span in seconds, ranges of whole buckets)
    from the rollups, ``ranges`` (the partial minutes) from the score rows.

    A sample attribute and a verdict column of :data:`rollup.VERDICT_COLUMNS` are both in
    the rollups' key, so the cost is the window's buckets and segments, never its samples.

    Args:
        conn: A connection to the store's database.
        metric: The metric.
        score: The stored score.
        keys: Segment keys: each row carries the samples' values of them.
        filters: Only samples whose attribute is one of the values.
        heads: Only samples whose attributes hold every label of one of these (an empty
            one: every sample).
        explain: Names and where each is read from.
        buckets: Whole rollup buckets.
        ranges: Ranges read from the score rows.

    Returns:
        One entry per explainer, key values and explainer value; samples without the
        explainer's value are in none.

    Raises:
        NotInRollups: An explainer names a verdict column the rollups do not key on.
    """
    for _, column in explain:
        if column is not None and column not in VERDICT_COLUMNS:
            raise NotInRollups(f"verdict column {column!r} is not in the rollups' key")
    if not explain or not heads:
        return []
    if is_sqlite(conn):
        found = _explained_in_python(conn, metric=metric, score=score, keys=keys,
                                     filters=filters, heads=heads, explain=explain,
                                     buckets=buckets, ranges=ranges)
        return [ExplainedSums(j, values, value, sums)
                for (j, values, value), sums in found.items()]
    jit_off(conn)
    merged: dict[tuple[int, tuple[str | None, ...], str], Sums] = {}
    statements = []
    if any(buckets.values()):
        statements.append(_explained_sql(
            "rollups", metric=metric, score=score, keys=keys, filters=filters, heads=heads,
            explain=explain, buckets=buckets, ranges=()))
    if ranges:
        statements.append(_explained_sql(
            "rows", metric=metric, score=score, keys=keys, filters=filters, heads=heads,
            explain=explain, buckets={}, ranges=ranges))
    for sql, params in statements:
        for row in conn.execute(text(sql), params).mappings():
            # GROUPING() sets the bit of each explainer left out of the row's set.
            j = next(i for i in range(len(explain))
                     if not row["mask"] & (1 << (len(explain) - 1 - i)))
            value = row[f"e{j}"]
            if value is None or not row["n"]:
                continue
            group = (j, tuple(row[f"s{i}"] for i in range(len(keys))), str(value))
            sums = Sums(int(row["n"]), float(row["total"]), float(row["total_sq"]),
                        to_utc(row["first_ts"]) if row["first_ts"] is not None else None)
            known = merged.get(group)
            merged[group] = known.plus(sums) if known else sums
    return [ExplainedSums(j, values, value, sums) for (j, values, value), sums in merged.items()]


def _explained_sql(source: str, *, metric: str, score: str, keys: Sequence[str],
                   filters: Mapping[str, Sequence[str]], heads: Sequence[Mapping[str, str]],
                   explain: Sequence[Explainer], buckets: Mapping[int, Sequence[Range]],
                   ranges: Sequence[Range]) -> tuple[str, dict[str, Any]]:
    """One Postgres statement of :func:`explained_sums`: over the rollup rows of
    ``buckets`` (``source`` ``rollups``) or the score rows of ``ranges`` (``rows``)."""
    params: dict[str, Any] = {"metric": metric, "score": score}
    if source == "rollups":
        alias = "r"
        conditions = ["r.metric = :metric", "r.name = :score", _spans_sql(buckets, params)]
        sums = ["r.n AS n", "r.total AS total", "r.total_sq AS total_sq",
                "r.first_ts AS first_ts"]
        source_sql = "score_rollups r"
    else:
        alias = "v"
        params["created_since"] = created_since(min(low for low, _ in ranges))
        conditions = ["vs.metric = :metric", "vs.name = :score",
                      ranges_sql("vs.sample_ts", ranges, params, prefix="t"),
                      # The partition key, so only the window's partitions are read.
                      "vs.created_at >= :created_since", "v.created_at >= :created_since"]
        sums = ["1 AS n", "vs.value AS total", "vs.value * vs.value AS total_sq",
                "vs.sample_ts AS first_ts"]
        source_sql = "verdict_scores vs JOIN verdicts v ON v.id = vs.verdict_id"
    for i, (key, values) in enumerate(sorted(filters.items())):
        params[f"f{i}"], params[f"fv{i}"] = key, list(values)
        conditions.append(f"({alias}.attributes ->> :f{i}) = ANY(:fv{i})")
    if not any(not head for head in heads):
        under = []
        for i, head in enumerate(heads):
            params[f"h{i}"] = json.dumps(dict(head))
            under.append(f"{alias}.attributes @> CAST(:h{i} AS jsonb)")
        conditions.append("(" + " OR ".join(under) + ")")
    columns = _key_columns(keys, params, alias=alias)
    for i, (name, column) in enumerate(explain):
        if column is None:
            params[f"x{i}"] = name
            columns.append(f"{alias}.attributes ->> :x{i} AS e{i}")
        else:
            columns.append(f"{alias}.{column} AS e{i}")
    inner = (f"SELECT {', '.join(sums + columns)} FROM {source_sql}"
             f" WHERE {' AND '.join(conditions)}")
    names = [f"s{i}" for i in range(len(keys))]
    extra = [f"e{i}" for i in range(len(explain))]
    sets = ", ".join("(" + ", ".join([*names, e]) + ")" for e in extra)
    sql = (f"SELECT GROUPING({', '.join(extra)}) AS mask, {', '.join([*names, *extra])},"
           " sum(n) AS n, coalesce(sum(total), 0) AS total,"
           " coalesce(sum(total_sq), 0) AS total_sq, min(first_ts) AS first_ts"
           f" FROM ({inner}) AS scored GROUP BY GROUPING SETS ({sets})")
    return sql, params


def ranges_sql(column: str, ranges: Iterable[Range], params: dict[str, Any], *, prefix: str,
            extra: str = "") -> str:
    """``(column >= low AND column < high) OR ...`` with the bounds as parameters."""
    terms = []
    for i, (low, high) in enumerate(ranges):
        params[f"{prefix}{i}a"], params[f"{prefix}{i}b"] = low, high
        terms.append(f"({extra}{column} >= :{prefix}{i}a AND {column} < :{prefix}{i}b)")
    return "(" + " OR ".join(terms) + ")"


def _explained_in_python(
    conn: Connection, *, metric: str, score: str, keys: Sequence[str],
    filters: Mapping[str, Sequence[str]], heads: Sequence[Mapping[str, str]],
    explain: Sequence[Explainer], buckets: Mapping[int, Sequence[Range]],
    ranges: Sequence[Range],
) -> dict[tuple[int, tuple[str | None, ...], str], Sums]:
    """:func:`explained_sums` summed in Python (SQLite: no GROUPING SETS, no JSON
    containment; an embedded store holds one machine's traffic)."""
    r, vs, v = score_rollups.c, verdict_scores.c, verdicts.c
    own = [r[column] if column else r.attributes for _, column in explain]
    parts: list[tuple[Any, list[Any], Sums]] = []
    if any(buckets.values()):
        rows = conn.execute(
            select(r.attributes, r.n, r.total, r.total_sq, r.first_ts, *own)
            .where(r.metric == metric, r.name == score, or_(*(
                and_(r.span_s == span, r.bucket >= to_utc(low), r.bucket < to_utc(high))
                for span, spanned in buckets.items() for low, high in spanned))),
        ).all()
        parts += [(row[0], list(row[5:]), Sums(int(row[1]), float(row[2]), float(row[3]),
                                               to_utc(row[4])))
                  for row in rows]
    if ranges:
        own_rows = [v[column] if column else v.attributes for _, column in explain]
        rows = conn.execute(
            select(v.attributes, vs.value, vs.sample_ts, *own_rows)
            .select_from(verdict_scores.join(verdicts, v.id == vs.verdict_id))
            .where(vs.metric == metric, vs.name == score,
                   or_(*(and_(vs.sample_ts >= to_utc(low), vs.sample_ts < to_utc(high))
                         for low, high in ranges))),
        ).all()
        parts += [(row[0], list(row[3:]), Sums(1, float(row[1] or 0.0),
                                               float(row[1] or 0.0) ** 2, to_utc(row[2])))
                  for row in rows]
    groups: dict[tuple[int, tuple[str | None, ...], str], list[Sums]] = {}
    for attributes, found, sums in parts:
        attributes = attributes or {}
        if not all(_text(attributes.get(key)) in values for key, values in filters.items()):
            continue
        if not any(all(_text(attributes.get(k)) == value for k, value in head.items())
                   for head in heads):
            continue
        values = tuple(_text(attributes.get(key)) for key in keys)
        for j, (name, column) in enumerate(explain):
            value = found[j] if column else (found[j] or {}).get(name)
            if value is not None:
                groups.setdefault((j, values, str(value)), []).append(sums)
    return {group: _sum(parts) for group, parts in groups.items()}


def _sum(parts: list[Sums]) -> Sums:
    firsts = [part.first_ts for part in parts if part.first_ts is not None]
    return Sums(sum(part.n for part in parts), math.fsum(part.total for part in parts),
                math.fsum(part.total_sq for part in parts), min(firsts) if firsts else None)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
