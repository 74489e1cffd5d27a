"""Windows read from the rollups equal windows read from the score rows, on both stores.

Random verdicts (late ones included), windows and exclusions on odd seconds; each
statistic the engine computes is compared: counts and levels exactly, means, variances
and the tests' p-values to floating-point rounding.
"""

from __future__ import annotations

import math
import random
from datetime import datetime, timedelta

import pytest
from sqlalchemy import select

from evalfleet.alerts import ledger
from evalfleet.alerts.rule import VERDICT_EXPLAINERS
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.statistic import Summary, compare_with_baseline
from evalfleet.alerts.window import (
    WindowQuery,
    _exclusion_periods,
    _raw,
    fetch_explained,
    fetch_summaries,
)
from evalfleet.store import SqlStore, VerdictKey
from evalfleet.store.queries.alert_windows import NotInRollups, explained_sums
from evalfleet.store.rollup import VERDICT_COLUMNS
from evalfleet.store.schema import verdict_scores, verdicts
from tests.evalfleet.ops.builders import NOW, verdict

KINDS = {"continuous": "faithfulness", "binary": "correct", "ordinal": "reasoning"}


def fill(store: SqlStore, rng: random.Random, count: int) -> None:
    records = []
    for i in range(count):
        sample_ts = NOW - timedelta(seconds=rng.uniform(0, 5 * 3600))
        attributes = {"app": f"a{rng.randrange(3)}", "route": f"/r{rng.randrange(2)}",
                      "deploy": f"d{rng.randrange(2)}"}
        if rng.random() < 0.1:
            del attributes["route" if rng.random() < 0.5 else "deploy"]
        records.append(verdict(
            f"w-{i}", key=VerdictKey(f"w-{i}", "rag_qa", rng.choice(["p1", "p2"]),
                                     rng.choice(["judge-1", "judge-2", "judge-3"])),
            sample_ts=sample_ts,
            created_at=sample_ts + timedelta(hours=rng.choice([0.01, 0.01, 30])),
            attributes=attributes,
            scores={"faithfulness": rng.random(), "correct": float(rng.random() < 0.8),
                    "reasoning": rng.randrange(5) / 4}))
    for start in range(0, count, 50):
        store.save(verdicts=records[start:start + 50], owner="w")


def both(store: SqlStore, query: WindowQuery, start_s: float, end_s: float) -> tuple[
        dict[Segment, Summary], dict[Segment, Summary]]:
    start, end = NOW - timedelta(seconds=start_s), NOW - timedelta(seconds=end_s)
    with store.engine.connect() as conn:
        rolled = fetch_summaries(conn, query, start=start, end=end)
        periods = _exclusion_periods(conn, query) if query.exclude_rule else []
        raw = _raw(conn, query, ((start, end),), periods)
    return rolled, raw


def assert_same(rolled: dict[Segment, Summary], raw: dict[Segment, Summary],
                kind: str) -> None:
    assert rolled.keys() == raw.keys()
    for segment, summary in raw.items():
        got = rolled[segment]
        assert (got.n, got.levels, got.first_seen_ts) == (
            summary.n, summary.levels, summary.first_seen_ts), segment
        assert got.mean == pytest.approx(summary.mean, rel=1e-12)
        assert got.variance == pytest.approx(summary.variance, rel=1e-9, abs=1e-12)
    whole = Segment()
    for segment in raw:
        if segment != whole and raw[segment].n > 1 and raw[whole].n > 1:
            expected = compare_with_baseline(kind, current=raw[segment], baseline=raw[whole],
                                             direction="decrease", confidence=0.95)
            found = compare_with_baseline(kind, current=rolled[segment],
                                          baseline=rolled[whole], direction="decrease",
                                          confidence=0.95)
            assert found.test == expected.test
            assert found.p_value == pytest.approx(expected.p_value, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("kind", list(KINDS))
def test_rollups_give_the_score_rows_numbers(any_store: SqlStore, kind: str) -> None:
    rng = random.Random(7)
    fill(any_store, rng, 400)
    query = WindowQuery("rag_qa", KINDS[kind], ("app", "route"),
                        filters=(("route", ("/r0", "/r1")),), with_levels=kind == "ordinal")
    for _ in range(6):
        start_s = rng.uniform(600, 5 * 3600)
        end_s = rng.uniform(0, start_s - 60)
        assert_same(*both(any_store, query, start_s, end_s), kind)
    assert_same(*both(any_store, query, 4 * 3600, 0), kind)  # on whole minutes and hours


def test_exclusions_on_odd_seconds_stay_exact(any_store: SqlStore) -> None:
    fill(any_store, random.Random(8), 300)
    with any_store.engine.begin() as conn:
        ledger.open_exclusion(conn, rule="r", segment=Segment.of({"app": "a1"}),
                              started_at=NOW - timedelta(seconds=3 * 3600 + 17))
        ledger.close_exclusions(conn, rule="r", segment=Segment.of({"app": "a1"}),
                                ended_at=NOW - timedelta(seconds=3600 + 41))
        ledger.open_exclusion(conn, rule="r", segment=Segment.of({"app": "a2"}),
                              started_at=NOW - timedelta(seconds=2 * 3600 + 1))
    for cap in (None, timedelta(minutes=47, seconds=3)):
        query = WindowQuery("rag_qa", "faithfulness", ("app",), exclude_rule="r",
                            exclusion_cap=cap)
        rolled, raw = both(any_store, query, 5 * 3600 - 13, 29)
        assert raw[Segment()].n < 300
        assert_same(rolled, raw, "continuous")


def test_an_ordinal_score_off_the_level_grid_is_read_from_the_rows(any_store: SqlStore) -> None:
    any_store.save(verdicts=[
        verdict(f"o-{i}", sample_ts=NOW - timedelta(minutes=30 + i), scores={"reasoning": v})
        for i, v in enumerate([0.1234, 0.1234, 0.5, 0.98765])], owner="w")
    query = WindowQuery("rag_qa", "reasoning", (), with_levels=True)
    rolled, raw = both(any_store, query, 3 * 3600, 0)
    assert rolled[Segment()].levels == ((0.1234, 2), (0.5, 1), (0.98765, 1))
    assert_same(rolled, raw, "ordinal")


EXPLAIN = ("judge_model", "judge_prompt_version", "deploy")


def raw_explained(store: SqlStore, query: WindowQuery, *, heads: list[Segment],
                  start: datetime, end: datetime) -> dict[Segment, Summary]:
    """The explained split computed in Python from every score row and its verdict: an
    attribute's units at the depth of every key, a verdict field's at the deepest segment
    the sample has values for."""
    vs, v = verdict_scores.c, verdicts.c
    with store.engine.connect() as conn:
        rows = conn.execute(select(vs.value, vs.sample_ts, v.attributes, v.judge_model,
                                   v.prompt_version).join(verdicts, v.id == vs.verdict_id)
                            .where(vs.metric == query.metric, vs.name == query.score)).all()
    groups: dict[Segment, list[tuple[float, float]]] = {}
    for value, ts, attributes, judge_model, prompt_version in rows:
        ts = ts if ts.tzinfo else ts.replace(tzinfo=start.tzinfo)
        if not start <= ts < end or not all(
                attributes.get(key) in values for key, values in query.filters):
            continue
        if not any(all(attributes.get(k) == val for k, val in head.labels) for head in heads):
            continue
        present = [attributes.get(key) for key in query.keys]
        prefix = []
        for key, found in zip(query.keys, present, strict=True):
            if found is None:
                break
            prefix.append((key, found))
        own = {"judge_model": judge_model, "prompt_version": prompt_version}
        for name in EXPLAIN:
            if name in VERDICT_EXPLAINERS:
                labels, label = prefix, own[VERDICT_EXPLAINERS[name]]
            elif None in present:
                continue
            else:
                labels, label = list(zip(query.keys, present, strict=True)), attributes.get(name)
            if label is not None:
                groups.setdefault(Segment((*labels, (name, label))), []).append(
                    (value, ts.timestamp()))
    return {unit: Summary(n=len(values), total=math.fsum(x for x, _ in values),
                          total_sq=math.fsum(x * x for x, _ in values),
                          first_seen_ts=min(t for _, t in values))
            for unit, values in groups.items()}


@pytest.mark.parametrize("heads", [
    [Segment()], [Segment.of({"app": "a1"})],
    [Segment.of({"app": "a0"}), Segment((("app", "a2"), ("route", "/r1")))]])
def test_an_explained_split_from_the_rollups_equals_the_score_rows(
        any_store: SqlStore, heads: list[Segment]) -> None:
    rng = random.Random(11)
    fill(any_store, rng, 500)
    query = WindowQuery("rag_qa", "faithfulness", ("app", "route"),
                        filters=(("app", ("a0", "a1", "a2")),))
    windows = [(4 * 3600, 0), (600, 0)]  # whole hours and minutes
    windows += [(start_s, rng.uniform(0, start_s - 60))  # partial minutes at both ends
                for start_s in (rng.uniform(600, 5 * 3600) for _ in range(4))]
    for start_s, end_s in windows:
        start, end = NOW - timedelta(seconds=start_s), NOW - timedelta(seconds=end_s)
        with any_store.engine.connect() as conn:
            rolled = fetch_explained(conn, query, explain=EXPLAIN, heads=heads, start=start,
                                     end=end)
        raw = raw_explained(any_store, query, heads=heads, start=start, end=end)
        assert rolled.keys() == raw.keys()
        assert {unit.labels[-1][0] for unit in raw} == set(EXPLAIN)
        for unit, summary in raw.items():
            got = rolled[unit]
            assert (got.n, got.first_seen_ts) == (summary.n, summary.first_seen_ts), unit
            assert got.mean == pytest.approx(summary.mean, rel=1e-12)
            assert got.variance == pytest.approx(summary.variance, rel=1e-9, abs=1e-12)


def test_every_verdict_field_an_incident_names_is_in_the_rollups_key(
        any_store: SqlStore) -> None:
    assert set(VERDICT_EXPLAINERS.values()) <= set(VERDICT_COLUMNS)
    with any_store.engine.connect() as conn, pytest.raises(NotInRollups, match="judge_mode"):
        explained_sums(conn, metric="rag_qa", score="faithfulness", keys=("app",), filters={},
                       heads=[{}], explain=[("judge_mode", "judge_mode")], buckets={},
                       ranges=[(NOW - timedelta(hours=1), NOW)])
