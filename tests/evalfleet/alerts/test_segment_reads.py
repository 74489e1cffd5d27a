"""The alert page's and a firing alert's sample reads equal the samples picked one by one.

On Postgres those reads find the segment's attribute sets in the rollups and read each
one's range of sample time on ``ix_verdicts_metric_segment_sample_ts``; SQLite compares
attributes row by row. The histograms come from the minute rollups, and the worst
samples from the minutes the rollups say can hold them. Random verdicts (several
attribute sets per segment, late ones in another day's partition, a second save of the
same keys; continuous scores, and ordinal ones with many ties), windows on odd seconds,
minutes kept by the triggers of before revision 0026 (no bins): the values, the
histograms and the worst samples must be exactly those of a plain filter over what was
saved.
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
from evalfleet.alerts.window import WindowQuery, fetch_explained
from evalfleet.core.metric import load_registry
from evalfleet.store import SqlStore
from evalfleet.store.queries.evidence import lowest_scoring, segment_histogram, segment_scores
from evalfleet.store.rollup import drop_trigger_statements, trigger_statements, value_bin
from tests.evalfleet.alerts.conftest import write_rules
from tests.evalfleet.ops.builders import NOW, verdict

#: How a score is drawn: on a two-decimal grid (mostly off the rollups' level grid), or
#: on a five-point scale, most of it at its ends (ties the worst must break by time).
SCORES = {
    "continuous": lambda rng: round(rng.random(), 2),
    "ordinal": lambda rng: rng.choice([0.0, 0.0, 0.25, 0.5, 0.75, 1.0, 1.0, 1.0]),
}


def saved(store: SqlStore, rng: random.Random, count: int, *,
          kind: str = "continuous", unbinned_share: float = 0.0) -> list[Any]:
    """``count`` random verdicts saved in batches (each saved twice: counted once); the
    first ``unbinned_share`` of the batches through the rollups' triggers of before
    revision 0026."""
    records = []
    for i in range(count):
        sample_ts = NOW - timedelta(seconds=rng.uniform(0, 3 * 3600))
        attributes = {"app": f"a{rng.randrange(3)}", "route": f"/r{rng.randrange(3)}"}
        if rng.random() < 0.3:
            attributes["user"] = f"u{rng.randrange(4)}"  # more sets in one segment
        records.append(verdict(
            f"w-{i}", sample_ts=sample_ts, attributes=attributes,
            created_at=sample_ts + timedelta(hours=rng.choice([0.01, 0.01, 30])),
            scores={"faithfulness": SCORES[kind](rng)}))
    old = int(count * unbinned_share)
    if old:
        make_triggers(store, binned=False)
        store.save(verdicts=records[:old], owner="w")
        make_triggers(store, binned=True)
    for start in range(old, count, 40):
        store.save(verdicts=records[start:start + 40], owner="w")
    store.save(verdicts=records[:40], owner="w")
    return records


def make_triggers(store: SqlStore, *, binned: bool) -> None:
    with store.engine.begin() as conn:
        dialect = conn.dialect.name
        for statement in [*drop_trigger_statements(dialect),
                          *trigger_statements(dialect, binned=binned)]:
            conn.exec_driver_sql(statement)


def matching(records: list[Any], *, labels: dict[str, str], routes: tuple[str, ...],
             start: datetime, end: datetime) -> list[Any]:
    return [r for r in records if start <= r.sample_ts < end
            and labels.items() <= r.attributes.items() and r.attributes["route"] in routes]


def rule_of(tmp_path: Path) -> Rule:
    path = write_rules(tmp_path / "rules.yaml", {
        "name": "drop", "segment_by": ["app"], "filters": {"route": ["/r0", "/r2"]},
        "window": "10m", "baseline": {"type": "trailing", "window": "1h", "gap": "10m"}})
    return load_rules(path, registry=load_registry()).rules[0]


@pytest.mark.parametrize(("kind", "unbinned_share"), [
    ("continuous", 0.0), ("ordinal", 0.0), ("continuous", 0.3)])
def test_window_values_histograms_and_worst_samples_equal_a_plain_filter(
        any_store: SqlStore, kind: str, unbinned_share: float) -> None:
    records = saved(any_store, random.Random(5), 600, kind=kind, unbinned_share=unbinned_share)
    segment_of = {"metric": "rag_qa", "score": "faithfulness",
                  "filters": {"route": ["/r0", "/r2"]}}
    for app in ("a0", "a1", "a2", "nobody"):
        for start_s, end_s in ((1817, 17), (3 * 3600 + 5, 600), (7, 0), (3 * 3600, 0)):
            start, end = NOW - timedelta(seconds=start_s), NOW - timedelta(seconds=end_s)
            wanted = matching(records, labels={"app": app}, routes=("/r0", "/r2"),
                              start=start, end=end)
            with any_store.engine.connect() as conn:
                values = segment_scores(conn, start=start, end=end, labels={"app": app},
                                        **segment_of)
                counts = segment_histogram(conn, start=start, end=end, labels={"app": app},
                                           **segment_of)
                worst = {(limit, top): lowest_scoring(
                    conn, start=start, end=end, labels={"app": app}, limit=limit,
                    highest=top, **segment_of)
                    for limit in (1, 7, 40) for top in (False, True)}
            assert sorted(values) == sorted(
                (r.scores["faithfulness"], r.sample_ts) for r in wanted), (app, start_s)
            binned = [0] * 10
            for r in wanted:
                binned[value_bin(r.scores["faithfulness"])] += 1
            assert counts == binned, (app, start_s)
            for (limit, top), found in worst.items():
                ranked = sorted(wanted, key=lambda r: (
                    -r.scores["faithfulness"] if top else r.scores["faithfulness"],
                    r.sample_ts, r.key.sample_id))
                assert [e.sample_id for e in found] == \
                    [r.key.sample_id for r in ranked[:limit]], (app, start_s, limit, top)
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
