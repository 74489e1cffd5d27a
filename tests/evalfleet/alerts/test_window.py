"""Window summaries from Postgres: levels, filters, sample-time windows, exclusions."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import Engine

from evalfleet.alerts import ledger
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.window import WindowQuery, fetch_summaries
from evalfleet.store import open_store
from tests.evalfleet.alerts import stream
from tests.evalfleet.alerts.test_engine import MINUTE, T0


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    store = open_store(database_url)
    yield store.engine
    store.close()


def points(values: list[float], **attributes: str) -> list[stream.Point]:
    return [stream.Point(T0 + i * MINUTE, v, dict(attributes)) for i, v in enumerate(values)]


def summaries(engine: Engine, query: WindowQuery, minutes: int = 60) -> dict[str, tuple]:
    with engine.connect() as conn:
        found = fetch_summaries(conn, query, start=T0, end=T0 + minutes * MINUTE)
    return {str(seg): (s.n, round(s.mean, 6), s.levels) for seg, s in found.items()}


def test_every_level_of_the_segments_at_once(engine: Engine) -> None:
    stream.write(engine, points([0.2, 0.4], app="a", route="/x") + points([1.0], app="a",
                 route="/y") + points([0.5], app="b") + points([0.0]))
    query = WindowQuery("rag_qa", "faithfulness", ("app", "route"))
    assert summaries(engine, query) == {
        "(all)": (5, 0.42, ()), "app=a": (3, round(1.6 / 3, 6), ()), "app=b": (1, 0.5, ()),
        "app=a,route=/x": (2, 0.3, ()), "app=a,route=/y": (1, 1.0, ()),
    }


def test_filters_levels_and_the_window_on_sample_time(engine: Engine) -> None:
    stream.write(engine, points([0.0, 0.25, 0.25, 1.0], app="a") + points([0.5], app="b"),
                 created_at=T0 + timedelta(days=3))  # stored late: windows do not care
    query = WindowQuery("rag_qa", "faithfulness", (), filters=(("app", ("a",)),),
                        with_levels=True)
    assert summaries(engine, query, minutes=3) == {
        "(all)": (3, round(0.5 / 3, 6), ((0.0, 1), (0.25, 2)))}
    assert summaries(engine, WindowQuery("rag_qa", "other_score", ())) == {}


def test_exclusions_drop_samples_of_the_segment_while_it_fired(engine: Engine) -> None:
    stream.write(engine, points([0.9] * 10, app="a") + points([0.9] * 10, app="b"))
    with engine.begin() as conn:
        ledger.open_exclusion(conn, rule="r", segment=Segment.of({"app": "a"}),
                              started_at=T0 + 5 * MINUTE)
    query = WindowQuery("rag_qa", "faithfulness", ("app",), exclude_rule="r")
    counts = {seg: n for seg, (n, _, _) in summaries(engine, query).items()}
    assert counts == {"(all)": 15, "app=a": 5, "app=b": 10}
    with engine.begin() as conn:
        ledger.close_exclusions(conn, rule="r", segment=Segment.of({"app": "a"}),
                                ended_at=T0 + 8 * MINUTE)
    counts = {seg: n for seg, (n, _, _) in summaries(engine, query).items()}
    assert counts == {"(all)": 17, "app=a": 7, "app=b": 10}
    with engine.begin() as conn:  # the whole rule fired: every sample of the period is out
        ledger.open_exclusion(conn, rule="r", segment=Segment(), started_at=T0)
    assert summaries(engine, query) == {}
