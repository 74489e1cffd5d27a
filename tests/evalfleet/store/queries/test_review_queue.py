"""The review queue on both backends: the random slice, strata, on-demand items, leases."""

from __future__ import annotations

import math
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, update

from evalfleet.core.review_slice import MetricSlice, ReviewSlice, Stratum
from evalfleet.store import SqlStore, VerdictKey, VerdictRecord, open_store
from evalfleet.store.queries.review_queue import LabelValue, ReviewQueue
from evalfleet.store.schema import review_items, verdict_samples

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
SAMPLE = {"input": "q <b>", "output": "a", "context": ["c"], "reference": None, "fields": {}}


def record(sample_id: str, *, score: float = 0.75, model: str = "judge-1",
           metric: str = "rag_qa", **changes: object) -> VerdictRecord:
    values: dict[str, object] = {
        "key": VerdictKey(sample_id, metric, "v1", model), "status": "ok",
        "error_class": None, "error": None, "reason": "because",
        "scores": {"faithfulness": score}, "raw_scores": {"faithfulness": score},
        "raw_output": "{}", "attempts": 1, "latency_ms": 5, "prompt_tokens": None,
        "completion_tokens": None, "attributes": {"app": "bot"},
        "sample_ts": NOW, "created_at": NOW, "sample": SAMPLE,
    }
    values.update(changes)
    return VerdictRecord(**values)  # type: ignore[arg-type]


def reviewing(store: SqlStore, review: ReviewSlice) -> SqlStore:
    """The same database, opened as a worker with ``review`` opens it."""
    return open_store(str(store.engine.url.render_as_string(hide_password=False)),
                      pool_size=2, review=review)


def save_many(store: SqlStore, records: list[VerdictRecord]) -> None:
    for start in range(0, len(records), 500):
        store.save(verdicts=records[start:start + 500], owner="w")


def within(observed: int, *, n: int, rate: float, sds: float = 4.0) -> bool:
    return abs(observed - n * rate) <= sds * math.sqrt(n * rate * (1 - rate))


def test_the_random_slice_matches_its_rate(any_store: SqlStore) -> None:
    worker = reviewing(any_store, ReviewSlice({"rag_qa": MetricSlice(rate=0.1)}))
    n = 3000
    save_many(worker, [record(f"s-{i}") for i in range(n)])
    # Another metric, not configured, queues nothing; failed and shadow verdicts neither.
    worker.save(verdicts=[record("x", metric="bbh_match"), record("f", status="failed"),
                          record("s", purpose="shadow")], owner="w")
    items = list(ReviewQueue(any_store).iter_items())
    worker.close()
    assert within(len(items), n=n, rate=0.1)
    assert {(i.reason, i.probability, i.stratum, i.metric) for i in items} == {
        ("random", 0.1, None, "rag_qa")}
    assert all(i.sample == SAMPLE and i.judge_scores == {"faithfulness": 0.75} for i in items)


def test_strata_keep_their_probabilities(any_store: SqlStore) -> None:
    review = ReviewSlice({"rag_qa": MetricSlice(rate=0.05, strata=(Stratum(0.5, 0.4),))})
    worker = reviewing(any_store, review)
    n = 2000
    save_many(worker, [record(f"s-{i}", score=0.25 if i % 2 else 0.9) for i in range(n)])
    items = list(ReviewQueue(any_store).iter_items())
    worker.close()
    by_stratum = Counter((i.stratum, i.probability) for i in items)
    assert set(by_stratum) == {("below 0.5", 0.4), (None, 0.05)}
    assert within(by_stratum["below 0.5", 0.4], n=n // 2, rate=0.4)
    assert within(by_stratum[None, 0.05], n=n // 2, rate=0.05)
    low = {i.sample_id for i in items if i.stratum}
    assert all(int(s.split("-")[1]) % 2 for s in low)


def test_two_workers_never_queue_a_sample_twice(any_store: SqlStore) -> None:
    review = ReviewSlice({"rag_qa": MetricSlice(rate=1.0)})
    workers = [reviewing(any_store, review) for _ in range(2)]
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def store_verdicts(worker: SqlStore, model: str) -> None:
        try:
            start.wait()
            for i in range(50):
                worker.save(verdicts=[record(f"s-{i}", model=model)], owner=model)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=store_verdicts, args=(w, f"m{n}"))
               for n, w in enumerate(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for worker in workers:
        worker.close()
    assert errors == []
    items = Counter(i.sample_id for i in ReviewQueue(any_store).iter_items())
    assert len(items) == 50 and set(items.values()) == {1}


def test_chosen_items_are_recorded_as_chosen(any_store: SqlStore) -> None:
    worker = reviewing(any_store, ReviewSlice({"rag_qa": MetricSlice(rate=1.0)}))
    worker.save(verdicts=[record("r-1")], owner="w")
    any_store.save(verdicts=[record("c-1", score=0.1), record("c-2", score=0.9),
                             record("c-3", attributes={"app": "other"})], owner="w")
    queue = ReviewQueue(any_store)
    assert queue.queue_chosen(reason="ids", detail=None, now=NOW, expire_s=3600,
                              sample_ids=["r-1", "c-1"]) == 1
    assert queue.queue_chosen(reason="filter", detail="low", now=NOW, expire_s=3600,
                              labels_wanted=2, segment={"app": "bot"}, score="faithfulness",
                              score_range=(0.0, 0.95)) == 1
    worker.close()
    items = {i.sample_id: (i.reason, i.probability, i.labels_wanted)
             for i in queue.iter_items()}
    assert items == {"r-1": ("random", 1.0, 1), "c-1": ("ids", None, 1),
                     "c-2": ("filter", None, 2)}


def test_leases_skips_and_labels(any_store: SqlStore) -> None:
    worker = reviewing(any_store, ReviewSlice({"rag_qa": MetricSlice(rate=1.0)},
                                              labels_wanted=2))
    worker.save(verdicts=[record("a", created_at=NOW), record("b", created_at=NOW
                                                                + timedelta(seconds=1))],
                owner="w")
    worker.close()
    queue = ReviewQueue(any_store)
    first = queue.take(reviewer="ann", now=NOW, lease_s=60)
    assert first is not None and first.sample_id == "a"
    # Ann gets the item she holds again; Bob gets the other one.
    assert queue.take(reviewer="ann", now=NOW, lease_s=60).id == first.id  # type: ignore[union-attr]
    other = queue.take(reviewer="bob", now=NOW, lease_s=60)
    assert other is not None and other.sample_id == "b"
    # Ann gives hers up, Bob's lease expires: Cy takes a, then b.
    assert queue.release(item_id=first.id, reviewer="ann")
    later = NOW + timedelta(seconds=61)
    assert queue.take(reviewer="cy", now=later, lease_s=60).sample_id == "a"  # type: ignore[union-attr]
    assert not queue.skip(item_id=first.id, reviewer="ann", now=later)
    assert queue.skip(item_id=first.id, reviewer="cy", now=later)
    assert queue.take(reviewer="cy", now=later, lease_s=60).sample_id == "b"  # type: ignore[union-attr]
    # Labels without the lease are refused; with it, the item wants one more reviewer.
    value = {"faithfulness": LabelValue(raw=1.0, value=1.0)}
    assert queue.label(item_id=first.id, reviewer="bob", labels=value, comment=None,
                       source="page", now=later) is None
    held = queue.take(reviewer="ann", now=later, lease_s=60)
    assert held is not None and held.id == first.id
    done = queue.label(item_id=first.id, reviewer="ann", labels=value, comment="ok",
                       source="page", now=later)
    assert done is not None and done.labels_given == 1 and done.done_at is None
    dan = queue.take(reviewer="dan", now=later, lease_s=60)
    assert dan is not None and dan.id == first.id
    done = queue.label(item_id=first.id, reviewer="dan", labels={
        "faithfulness": LabelValue(raw=None, value=None)}, comment=None, source="page", now=later)
    assert done is not None and done.labels_given == 2 and done.done_at is not None
    assert queue.take(reviewer="ann", now=later, lease_s=60) is None  # a: done; b: cy's
    counts = {c.metric: c for c in queue.counts(now=later)}["rag_qa"]
    assert (counts.random, counts.labelled, counts.skipped, counts.open) == (2, 1, 0, 1)
    labels = [(lab.reviewer, lab.raw_value, lab.comment) for lab in queue.iter_labels()]
    assert labels == [("ann", 1.0, "ok"), ("dan", None, None)]


def test_an_item_keeps_its_sample_when_the_verdicts_sample_is_purged(
        any_store: SqlStore) -> None:
    worker = reviewing(any_store, ReviewSlice({"rag_qa": MetricSlice(rate=1.0)}))
    worker.save(verdicts=[record("a")], owner="w")
    worker.close()
    with any_store.begin() as conn:
        conn.execute(delete(verdict_samples))
    (item,) = ReviewQueue(any_store).iter_items()
    assert item.sample == SAMPLE


def test_reviewer_tokens_are_kept_hashed(any_store: SqlStore) -> None:
    queue = ReviewQueue(any_store)
    token = queue.add_reviewer("ann", now=NOW)
    assert queue.reviewer_for(token) == "ann" and queue.reviewer_for(token + "x") is None
    with any_store.connect() as conn:
        stored = conn.exec_driver_sql("SELECT token_digest FROM reviewers").scalar_one()
    assert token not in stored
    new = queue.add_reviewer("ann", now=NOW)
    assert queue.reviewer_for(token) is None and queue.reviewer_for(new) == "ann"


def test_retention_takes_the_samples_of_items_that_no_longer_wait(any_store: SqlStore) -> None:
    worker = reviewing(any_store, ReviewSlice({"rag_qa": MetricSlice(rate=1.0)},
                                              expire_s=86400))
    worker.save(verdicts=[record(name) for name in ("done", "waiting", "expired")], owner="w")
    worker.save(verdicts=[record("new", created_at=NOW + timedelta(days=5))], owner="w")
    worker.close()
    queue = ReviewQueue(any_store)
    done = queue.take(reviewer="ann", now=NOW, lease_s=60)
    assert done is not None and done.sample_id == "done"
    queue.label(item_id=done.id, reviewer="ann", now=NOW, comment=None, source="page",
                labels={"faithfulness": LabelValue(raw=1.0, value=1.0)})
    with any_store.begin() as conn:  # "waiting" waits longer than the others
        conn.execute(update(review_items).where(review_items.c.sample_id == "waiting")
                     .values(expires_at=NOW + timedelta(days=30)))
    args = {"before": NOW + timedelta(days=2), "now": NOW + timedelta(days=3)}
    assert queue.purge_samples(**args, dry_run=True) == 2
    assert queue.purge_samples(**args) == 2
    kept = {item.sample_id: item.sample is not None for item in queue.iter_items()}
    assert kept == {"done": False, "waiting": True, "expired": False, "new": True}
