"""The alert page's trend summed from the rollups equals the trend of the score rows."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from evalfleet.alerts.rule import Rule, load_rules
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.view import load_trend
from evalfleet.core.metric import load_registry
from evalfleet.store import SqlStore
from evalfleet.store.queries.evidence import segment_scores
from tests.evalfleet.alerts.conftest import write_rules
from tests.evalfleet.alerts.test_window_rollup import fill
from tests.evalfleet.ops.builders import NOW


def drop_rule(tmp_path: Path) -> Rule:
    path = write_rules(tmp_path / "rules.yaml", {
        "name": "drop", "segment_by": ["app"], "filters": {"route": ["/r0"]},
        "window": "10m", "baseline": {"type": "trailing", "window": "2h", "gap": "10m"}})
    return load_rules(path, registry=load_registry()).rules[0]


def expected(store: SqlStore, rule: Rule, segment: Segment, start: datetime,
             end: datetime) -> tuple[int, float | None]:
    with store.engine.connect() as conn:
        values = [value for value, _ in segment_scores(
            conn, metric=rule.spec.metric, score=rule.spec.series, start=start, end=end,
            labels=segment.as_dict(), filters=rule.spec.filter_values)]
    return len(values), (sum(values) / len(values) if values else None)


@pytest.mark.parametrize(("span", "buckets"), [
    (timedelta(hours=2, minutes=20), 24),   # minutes (5 a point)
    (timedelta(hours=4, minutes=50), 4),    # whole hours
    (timedelta(minutes=7), 24),             # one minute a point
])
def test_the_trend_from_the_rollups_equals_the_score_rows(
        any_store: SqlStore, tmp_path: Path, span: timedelta, buckets: int) -> None:
    fill(any_store, random.Random(11), 400)
    rule = drop_rule(tmp_path)
    segment = Segment.of({"app": "a1"})
    for end in (NOW - timedelta(seconds=17), NOW - timedelta(minutes=42)):
        with any_store.engine.connect() as conn:
            trend = load_trend(conn, rule, segment, end=end, span=span, buckets=buckets)
        assert trend and trend[0].start >= end - span and trend[-1].start < end
        edges = [point.start for point in trend] + [end]
        assert all(b.start.second == 0 and b.start.microsecond == 0 for b in trend)
        assert sum(point.n for point in trend) > 0
        for point, high in zip(trend, edges[1:], strict=True):
            n, mean = expected(any_store, rule, segment, point.start, high)
            assert point.n == n
            assert point.mean == (None if mean is None else pytest.approx(mean, rel=1e-12))
