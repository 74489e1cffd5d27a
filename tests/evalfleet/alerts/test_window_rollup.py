"""Windows read from the rollups equal windows read from the score rows, on both stores.

Random verdicts (late ones included), windows and exclusions on odd seconds; each
statistic the engine computes is compared: counts and levels exactly, means, variances
and the tests' p-values to floating-point rounding.
"""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from evalfleet.alerts import ledger
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.statistic import Summary, compare_with_baseline
from evalfleet.alerts.window import WindowQuery, _exclusion_periods, _raw, fetch_summaries
from evalfleet.store import SqlStore
from tests.evalfleet.ops.builders import NOW, verdict

KINDS = {"continuous": "faithfulness", "binary": "correct", "ordinal": "reasoning"}


def fill(store: SqlStore, rng: random.Random, count: int) -> None:
    records = []
    for i in range(count):
        sample_ts = NOW - timedelta(seconds=rng.uniform(0, 5 * 3600))
        records.append(verdict(
            f"w-{i}", sample_ts=sample_ts,
            created_at=sample_ts + timedelta(hours=rng.choice([0.01, 0.01, 30])),
            attributes={"app": f"a{rng.randrange(3)}", "route": f"/r{rng.randrange(2)}"},
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
