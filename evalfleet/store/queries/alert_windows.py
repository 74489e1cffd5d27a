"""The alert engine's reads of a score's window (``evalfleet.alerts.window`` asks them).

Plain data in and out: metric, score, attribute names and values, ranges of sample time;
sums per group. Whole minutes and hours are read from ``score_rollups``
(``evalfleet.store.rollup``), the partial minutes at a window's ends from the score
rows joined to their verdicts.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, or_, select, text
from sqlalchemy.engine import Connection

from evalfleet.store.dialect import is_sqlite
from evalfleet.store.partitions import created_since
from evalfleet.store.rollup import VERDICT_COLUMNS
from evalfleet.store.schema import score_rollups, verdict_scores, verdicts
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
    # These statements run in milliseconds; a long range's row estimate still passes
    # jit_above_cost, and compiling then costs seconds (docs/operating.md).
    conn.exec_driver_sql("SET LOCAL jit = off")
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
        alias, spans = "r", []
        for span, spanned in buckets.items():
            if spanned:
                params[f"span{span}"] = span
                spans.append(ranges_sql("r.bucket", spanned, params, prefix=f"b{span}_",
                                     extra=f"r.span_s = :span{span} AND "))
        conditions = ["r.metric = :metric", "r.name = :score", "(" + " OR ".join(spans) + ")"]
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
    columns = []
    for i, key in enumerate(keys):
        params[f"k{i}"] = key
        columns.append(f"{alias}.attributes ->> :k{i} AS s{i}")
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
