"""The alert page's and a firing alert's sample reads equal the samples picked one by one.

On Postgres those reads find the segment's attribute sets in the rollups and read each
one's range of sample time on ``ix_verdicts_metric_segment_sample_ts``; SQLite compares
attributes row by row. Random verdicts (several attribute sets per segment, late ones in
another day's partition, a second save of the same keys), windows on odd seconds: the
values and the worst samples must be exactly those of a plain filter over what was saved.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from evalfleet.alerts.evidence import window_evidence
from evalfleet.alerts.rule import Rule, load_rules
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.view import load_scored
from evalfleet.alerts.window import WindowQuery, fetch_explained
from evalfleet.core.metric import load_registry
from evalfleet.store import SqlStore
from evalfleet.store.queries.evidence import lowest_scoring, segment_window
from tests.evalfleet.alerts.conftest import write_rules
from tests.evalfleet.ops.builders import NOW, verdict


def saved(store: SqlStore, rng: random.Random, count: int) -> list[Any]:
    """``count`` random verdicts saved in batches (each saved twice: counted once)."""
    records = []
    for i in range(count):
        sample_ts = NOW - timedelta(seconds=rng.uniform(0, 3 * 3600))
        attributes = {"app": f"a{rng.randrange(3)}", "route": f"/r{rng.randrange(3)}"}
        if rng.random() < 0.3:
            attributes["user"] = f"u{rng.randrange(4)}"  # more sets in one segment
        records.append(verdict(
            f"w-{i}", sample_ts=sample_ts, attributes=attributes,
            created_at=sample_ts + timedelta(hours=rng.choice([0.01, 0.01, 30])),
            scores={"faithfulness": round(rng.random(), 2)}))
    for start in range(0, count, 40):
        store.save(verdicts=records[start:start + 40], owner="w")
    store.save(verdicts=records[:40], owner="w")
    return records


def matching(records: list[Any], *, labels: dict[str, str], routes: tuple[str, ...],
             start: datetime, end: datetime) -> list[Any]:
    return [r for r in records if start <= r.sample_ts < end
            and labels.items() <= r.attributes.items() and r.attributes["route"] in routes]


def rule_of(tmp_path: Path) -> Rule:
    path = write_rules(tmp_path / "rules.yaml", {
        "name": "drop", "segment_by": ["app"], "filters": {"route": ["/r0", "/r2"]},
        "window": "10m", "baseline": {"type": "trailing", "window": "1h", "gap": "10m"}})
    return load_rules(path, registry=load_registry()).rules[0]


def test_window_values_and_worst_samples_equal_a_plain_filter(
        any_store: SqlStore, tmp_path: Path) -> None:
    records = saved(any_store, random.Random(5), 600)
    rule = rule_of(tmp_path)
    for app in ("a0", "a1", "a2", "nobody"):
        segment = Segment.of({"app": app})
        for start_s, end_s in ((1817, 17), (3 * 3600 + 5, 600), (7, 0)):
            start, end = NOW - timedelta(seconds=start_s), NOW - timedelta(seconds=end_s)
            wanted = matching(records, labels={"app": app}, routes=("/r0", "/r2"),
                              start=start, end=end)
            with any_store.engine.connect() as conn:
                values = load_scored(conn, rule, segment, start=start, end=end)
                worst = lowest_scoring(conn, metric="rag_qa", score="faithfulness",
                                       start=start, end=end, labels={"app": app},
                                       filters={"route": ["/r0", "/r2"]}, limit=7)
                best = lowest_scoring(conn, metric="rag_qa", score="faithfulness",
                                      start=start, end=end, labels={"app": app},
                                      filters={"route": ["/r0", "/r2"]}, limit=4,
                                      highest=True)
            assert sorted(values) == sorted(
                (r.scores["faithfulness"], r.sample_ts) for r in wanted), (app, start_s)
            by_score = sorted(wanted, key=lambda r: (r.scores["faithfulness"], r.sample_ts,
                                                     r.key.sample_id))
            assert [e.sample_id for e in worst] == [r.key.sample_id for r in by_score[:7]]
            highest = sorted(wanted, key=lambda r: (-r.scores["faithfulness"], r.sample_ts,
                                                    r.key.sample_id))
            assert [e.sample_id for e in best] == [r.key.sample_id for r in highest[:4]]
            for limit, top in ((7, False), (4, True)):
                with any_store.engine.connect() as conn:
                    both = segment_window(conn, metric="rag_qa", score="faithfulness",
                                          start=start, end=end, labels={"app": app},
                                          filters={"route": ["/r0", "/r2"]}, limit=limit,
                                          highest=top)
                assert sorted(both[0]) == sorted(values)
                assert both[1] == (best if top else worst), (app, start_s, top)
    assert any(matching(records, labels={"app": "a1"}, routes=("/r0", "/r2"),
                        start=NOW - timedelta(seconds=1817), end=NOW - timedelta(seconds=17)))


def test_a_firing_alerts_evidence_reads_its_window(any_store: SqlStore,
                                                   tmp_path: Path) -> None:
    records = saved(any_store, random.Random(8), 300)
    rule = rule_of(tmp_path)
    at = NOW - timedelta(seconds=43)
    with any_store.engine.connect() as conn:
        evidence = window_evidence(conn, rule, Segment.of({"app": "a2"}), at=at, limit=3)
    wanted = sorted(matching(records, labels={"app": "a2"}, routes=("/r0", "/r2"),
                             start=at - timedelta(minutes=10), end=at),
                    key=lambda r: (r.scores["faithfulness"], r.sample_ts, r.key.sample_id))
    assert wanted
    assert [e.sample_id for e in evidence] == [r.key.sample_id for r in wanted[:3]]


def test_the_judge_model_under_incident_heads_equals_a_plain_sum(
        any_store: SqlStore, tmp_path: Path) -> None:
    """``fetch_explained``'s read of the verdict's own fields under heads (on Postgres by the
    segment index, a range per attribute set under the heads) against the samples summed
    one by one."""
    records = saved(any_store, random.Random(11), 400)
    rule = rule_of(tmp_path)
    query = WindowQuery.for_rule(rule)
    start, end = NOW - timedelta(seconds=1817), NOW - timedelta(seconds=17)
    for heads in ([Segment.of({"app": "a1"})], [Segment.of({"app": "a0"}),
                                                Segment.of({"app": "a2"})],
                  [Segment()], [Segment.of({"app": "nobody"})]):
        with any_store.engine.begin() as conn:
            units = fetch_explained(conn, query, explain=("judge_model",), heads=heads,
                                    start=start, end=end)
        wanted: dict[Segment, list[float]] = {}
        for head in heads:
            for r in matching(records, labels=head.as_dict(), routes=("/r0", "/r2"),
                              start=start, end=end):
                unit = Segment.of({"app": r.attributes["app"], "judge_model": r.key.judge_model})
                wanted.setdefault(unit, []).append(r.scores["faithfulness"])
        assert {unit: summary.n for unit, summary in units.items()} == {
            unit: len(values) for unit, values in wanted.items()}, heads
        for unit, values in wanted.items():
            assert units[unit].total == pytest.approx(sum(values))
