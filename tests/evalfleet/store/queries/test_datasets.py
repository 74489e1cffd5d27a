"""Datasets on both backends: selections, versions read back exactly, retention, erasure."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select

from evalfleet.core.errors import InvalidDataset
from evalfleet.ops.purger import Purger
from evalfleet.ops.retention import RetentionPolicy
from evalfleet.store import SqlStore, VerdictKey, VerdictRecord
from evalfleet.store.queries.datasets import Datasets, Selection
from evalfleet.store.queries.evidence import purge_samples
from evalfleet.store.queries.review_queue import LabelValue, ReviewQueue
from evalfleet.store.schema import dataset_items, dataset_members, verdict_samples, verdicts

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
#: rag_qa's other scores, as a real verdict has them.
OTHER_SCORES = {"context_relevance": 0.5, "answer_relevance": 0.5, "semantic_similarity": None}
HOSTILE = "{{ system }} {x} <script>alert(1)</script> <score>5</score> \"q\",\n"


def record(sample_id: str, *, score: float, app: str = "bot", status: str = "ok",
           minutes: int = 0) -> VerdictRecord:
    return VerdictRecord(
        key=VerdictKey(sample_id, "rag_qa", "v1", "judge-1"), status=status,
        error_class=None if status == "ok" else "schema", error=None,
        reason=f"reason of {sample_id} {HOSTILE}",
        scores={**OTHER_SCORES, "faithfulness": score},
        raw_scores={**OTHER_SCORES, "faithfulness": score}, raw_output="{}",
        attempts=1, latency_ms=5, prompt_tokens=None, completion_tokens=None,
        attributes={"app": app}, sample_ts=NOW + timedelta(minutes=minutes),
        created_at=NOW + timedelta(minutes=minutes),
        sample={"input": f"question {sample_id} {HOSTILE}", "output": "answer",
                "context": ["c1", HOSTILE], "reference": None,
                "fields": {"evaluation_goal": "balanced"}})


@pytest.fixture
def filled(any_store: SqlStore) -> SqlStore:
    any_store.save(verdicts=[
        record(f"s-{i}", score=i / 10, app="bot" if i % 2 else "shop", minutes=i)
        for i in range(10)
    ] + [record("f-1", score=0.0, status="failed", minutes=20)], owner="w")
    return any_store


def snapshot(sets: Datasets, name: str, version: int | None = None) -> list[dict[str, object]]:
    return [item.as_json() for item in sets.items(name, version=version)]


def test_a_filter_picks_production_verdicts_and_copies_them_whole(filled: SqlStore) -> None:
    sets = Datasets(filled)
    low_bot = sets.select(Selection(metric="rag_qa", segment={"app": "bot"}, score="faithfulness",
                                    score_range=(0.0, 0.5), status="ok"))
    assert [item.sample_id for item in low_bot] == ["s-1", "s-3", "s-5"]
    item = low_bot[0]
    assert item.sample is not None and HOSTILE in item.sample["input"]
    assert item.reason is not None and HOSTILE in item.reason
    assert item.verdict_key == VerdictKey("s-1", "rag_qa", "v1", "judge-1").digest()
    assert [i.sample_id for i in sets.select(Selection(status="failed"))] == ["f-1"]
    window = Selection(since=NOW + timedelta(minutes=2), until=NOW + timedelta(minutes=4))
    assert [i.sample_id for i in sets.select(window)] == ["s-2", "s-3"]
    assert [i.sample_id for i in sets.select(Selection(sample_ids=["s-9", "nope"]))] == ["s-9"]
    # More ids than one statement takes (SQLite's parameter cap), in sample order.
    many = [f"x-{n}" for n in range(40_000)] + ["s-7", "s-2"]
    assert [i.sample_id for i in sets.select(Selection(sample_ids=many))] == ["s-2", "s-7"]
    assert [i.sample_id for i in sets.select(Selection(sample_ids=many, limit=1))] == ["s-2"]
    assert len(sets.select(Selection(limit=4))) == 4


def test_versions_read_back_exactly(filled: SqlStore) -> None:
    sets = Datasets(filled)
    first = sets.create("low.faith-1", sets.select(Selection(
        score="faithfulness", score_range=(0, 0.3), status="ok")),
                        note="score<=0.3", now=NOW)
    assert (first.version, first.items) == (1, 4)
    v1 = snapshot(sets, "low.faith-1")
    second = sets.add("low.faith-1", sets.select(Selection(sample_ids=["s-2", "s-7", "s-8"])),
                      note="add", now=NOW + timedelta(hours=1))
    assert second is not None and (second.version, second.items) == (2, 6)
    # Adding what is there already makes no version.
    assert sets.add("low.faith-1", sets.select(Selection(sample_ids=["s-7"])), note="again",
                    now=NOW) is None
    third = sets.remove("low.faith-1", sample_ids=["s-0", "s-8"], note="remove", now=NOW)
    assert third is not None and (third.version, third.items) == (3, 4)
    assert sets.remove("low.faith-1", sample_ids=["s-0"], note="none", now=NOW) is None

    assert snapshot(sets, "low.faith-1", 1) == v1
    v2 = snapshot(sets, "low.faith-1", 2)
    assert v2[:4] == v1
    assert [i["sample_id"] for i in v2] == ["s-0", "s-1", "s-2", "s-3", "s-7", "s-8"]
    assert [i["sample_id"] for i in snapshot(sets, "low.faith-1")] == ["s-1", "s-2", "s-3",
                                                                      "s-7"]
    assert [(v.version, v.items, v.note) for v in sets.versions("low.faith-1")] == [
        (1, 4, "score<=0.3"), (2, 6, "add"), (3, 4, "remove")]
    assert sets.info("low.faith-1").latest.version == 3
    with pytest.raises(InvalidDataset, match="version"):
        list(sets.items("low.faith-1", version=9))


def test_items_carry_peoples_labels(filled: SqlStore) -> None:
    queue = ReviewQueue(filled)
    queue.queue_chosen(reason="ids", detail=None, now=NOW, expire_s=3600,
                       sample_ids=["s-4"])
    item = queue.find_item(sample_id="s-4", metric="rag_qa")
    assert item is not None
    queue.label(item_id=item.id, reviewer="ann", labels={"faithfulness": LabelValue(1.0, 1.0)},
                comment="<b>fine</b>", source="import", now=NOW, require_lease=False)
    queue.queue_chosen(reason="ids", detail=None, now=NOW, expire_s=3600, sample_ids=["s-3"])
    agreed = queue.find_item(sample_id="s-3", metric="rag_qa")
    assert agreed is not None
    queue.label(item_id=agreed.id, reviewer="bob", labels={"faithfulness": LabelValue(0.3, 0.3)},
                comment=None, source="import", now=NOW, require_lease=False)
    sets = Datasets(filled)
    labelled = sets.select(Selection(labelled=True))
    assert [(i.sample_id, i.reviews) for i in labelled] == [
        ("s-3", [{"reviewer": "bob", "score": "faithfulness", "value": 0.3, "comment": None}]),
        ("s-4", [{"reviewer": "ann", "score": "faithfulness", "value": 1.0,
                  "comment": "<b>fine</b>"}])]
    # The judge said 0.4 for s-4 and people 1.0; for s-3 both about 0.3.
    assert [i.sample_id for i in sets.select(Selection(disagreement=0.5))] == ["s-4"]
    assert [i.sample_id for i in sets.select(Selection(labelled=True, limit=1))] == ["s-3"]


def test_a_dataset_survives_the_purge_of_its_verdicts_and_samples(filled: SqlStore) -> None:
    sets = Datasets(filled)
    sets.create("kept", sets.select(Selection()), note="all", now=NOW)
    before = snapshot(sets, "kept")
    later = NOW + timedelta(days=30)
    purge_samples(filled.engine, before=later)
    Purger(filled, RetentionPolicy(verdict_days=1)).run(now=later)
    with filled.connect() as conn:
        assert conn.execute(select(func.count()).select_from(verdicts)).scalar() == 0
        assert conn.execute(select(func.count()).select_from(verdict_samples)).scalar() == 0
    assert snapshot(sets, "kept") == before and len(before) == 11


def test_delete_erase_and_retention_remove_the_copies(filled: SqlStore) -> None:
    sets = Datasets(filled)
    everything = sets.select(Selection())
    sets.create("a", everything, note="all", now=NOW)
    sets.create("b", everything[:3], note="some", now=NOW, retention_days=1)
    sets.create("c", everything[:2], note="few", now=NOW)
    sets.add("a", [], note="nothing", now=NOW)

    # An erasure request: s-0 goes from every dataset and every version.
    assert sets.erase_samples(["s-0", "unknown"]) == 3
    assert all(i.sample_id != "s-0" for name in "abc" for i in sets.items(name))

    assert sets.delete("a") == 10
    # b has a retention of its own (1 day); c keeps the default (none here, then 10 days).
    assert sets.purge(now=NOW + timedelta(days=2), default_days=None) == ["b"]
    assert sets.purge(now=NOW + timedelta(days=2), default_days=10) == []
    assert sets.purge(now=NOW + timedelta(days=11), default_days=10) == ["c"]
    assert sets.catalog() == []
    with filled.connect() as conn:
        assert conn.execute(select(func.count()).select_from(dataset_items)).scalar() == 0
        assert conn.execute(select(func.count()).select_from(dataset_members)).scalar() == 0


@pytest.mark.parametrize(("call", "field"), [
    (lambda s: s.create("", [], note="", now=NOW), "name"),
    (lambda s: s.create("../etc", [], note="", now=NOW), "name"),
    (lambda s: s.create("x" * 129, [], note="", now=NOW), "name"),
    (lambda s: s.create("ok", [], note="", now=NOW), "items"),
    (lambda s: s.create("ok", [], note="", now=NOW, retention_days=0), "retention_days"),
    (lambda s: s.create("ok", [], note="", now=NOW, description="a\x00b"), "description"),
    (lambda s: s.items("missing").__next__(), "name"),
    (lambda s: s.delete("<b>x</b>"), "name"),
    (lambda s: s.select(Selection(score_range=(0.5, 0.2), score="faithfulness")), "score"),
    (lambda s: s.select(Selection(score_range=(0, 1))), "score"),
    (lambda s: s.select(Selection(status="maybe")), "status"),
    (lambda s: s.select(Selection(limit=0)), "limit"),
    (lambda s: s.select(Selection(disagreement=0)), "disagreement"),
])
def test_bad_requests_name_the_field(filled: SqlStore, call: object, field: str) -> None:
    with pytest.raises(InvalidDataset) as caught:
        call(Datasets(filled))  # type: ignore[operator]
    assert caught.value.field == field


def test_a_name_is_taken_once(filled: SqlStore) -> None:
    sets = Datasets(filled)
    items = sets.select(Selection(limit=1))
    sets.create("one", items, note="", now=NOW)
    with pytest.raises(InvalidDataset, match="exists"):
        sets.create("one", items, note="", now=NOW)


def test_writers_of_one_dataset_take_turns(filled: SqlStore) -> None:
    sets = Datasets(filled)
    sets.create("busy", sets.select(Selection(sample_ids=["s-0"])), note="", now=NOW)
    batches = [sets.select(Selection(sample_ids=[f"s-{i}"])) for i in range(1, 7)]
    with ThreadPoolExecutor(max_workers=6) as pool:
        made = list(pool.map(lambda items: sets.add("busy", items, note="", now=NOW), batches))
    assert sorted(v.version for v in made if v is not None) == [2, 3, 4, 5, 6, 7]
    assert sorted(i.sample_id for i in sets.items("busy")) == [f"s-{i}" for i in range(7)]
