"""Synthetic verdict streams written straight into the verdict store's tables."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np
from sqlalchemy import Engine, insert, text

from evalfleet.store.schema import verdict_scores, verdicts

_ids = itertools.count()


@dataclass(frozen=True)
class Point:
    """One verdict with one score."""

    sample_ts: datetime
    value: float
    attributes: dict[str, str] = field(default_factory=dict)
    judge_model: str = "judge"


def steady(
    *, start: datetime, minutes: float, per_minute: float,
    mean: float | Callable[[datetime], float], sd: float = 0.1,
    attributes: dict[str, str] | None = None, seed: int = 0, kind: str = "continuous",
) -> list[Point]:
    """Evenly spaced samples from ``start``; values around ``mean`` (a constant or a function
    of time): clipped normal (continuous), Bernoulli (binary), or a 1-5 score (ordinal)."""
    rng = np.random.default_rng(seed)
    count = round(minutes * per_minute)
    step = timedelta(minutes=1 / per_minute)
    points = []
    for i in range(count):
        ts = start + i * step
        centre = mean(ts) if callable(mean) else mean
        if kind == "binary":
            value = float(rng.random() < centre)
        elif kind == "ordinal":
            raw = np.clip(np.rint(1 + 4 * centre + rng.normal(0, sd * 4)), 1, 5)
            value = (float(raw) - 1) / 4
        else:
            value = float(np.clip(rng.normal(centre, sd), 0.0, 1.0))
        points.append(Point(ts, value, dict(attributes or {})))
    return points


def write(engine: Engine, points: Iterable[Point], *, metric: str = "rag_qa",
          score: str = "faithfulness", created_at: datetime | None = None) -> int:
    """Insert one verdict and one score row per point; returns how many."""
    rows = []
    for point in points:
        n = next(_ids)
        rows.append({
            "sample_id": f"syn-{n}", "metric": metric, "prompt_version": "p1",
            "judge_model": point.judge_model, "status": "ok", "scores": {score: point.value},
            "raw_scores": {score: point.value}, "attempts": 1, "latency_ms": 1,
            "attributes": point.attributes, "sample_ts": point.sample_ts,
            "created_at": created_at or point.sample_ts,
        })
    if not rows:
        return 0
    with engine.begin() as conn:
        # Ids taken from the sequence up front: a plain executemany is many times faster
        # than one with RETURNING.
        if conn.dialect.name == "sqlite":  # one writer: the next ids are ours
            first = conn.execute(text("SELECT coalesce(max(id), 0) + 1 FROM verdicts")).scalar()
            ids = list(range(int(first), int(first) + len(rows)))
        else:
            ids = conn.execute(text(
                "SELECT nextval(pg_get_serial_sequence('verdicts', 'id'))"
                " FROM generate_series(1, :n)"), {"n": len(rows)}).scalars().all()
        for verdict_id, row in zip(ids, rows, strict=True):
            row["id"] = verdict_id
        conn.execute(insert(verdicts), rows)
        conn.execute(insert(verdict_scores), [
            {"verdict_id": verdict_id, "name": score, "metric": metric,
             "value": row["scores"][score], "sample_ts": row["sample_ts"],
             "created_at": row["created_at"]}
            for verdict_id, row in zip(ids, rows, strict=True)
        ])
    return len(rows)
