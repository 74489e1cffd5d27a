"""The verdict store on both backends: claims, exactly-once verdicts, dead letters, export."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from evalfleet.store import (
    Claim,
    ClaimState,
    DeadLetter,
    SqlStore,
    VerdictKey,
    VerdictRecord,
    VerdictStore,
    migrate,
    open_store,
)
from evalfleet.store.migration import alembic_config
from evalfleet.store.queries.export import export_row
from evalfleet.store.schema import metadata, schema_filter

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
KEY = VerdictKey("req-1", "rag_qa", "abc123", "judge-1")


def record(key: VerdictKey = KEY, **changes: object) -> VerdictRecord:
    values: dict[str, object] = {
        "key": key, "status": "ok", "error_class": None, "error": None, "reason": "fine",
        "scores": {"faithfulness": 0.75, "semantic_similarity": None},
        "raw_scores": {"faithfulness": 0.75, "semantic_similarity": None},
        "raw_output": '{"faithfulness": 0.75}', "attempts": 1, "latency_ms": 12,
        "prompt_tokens": 100, "completion_tokens": 20, "attributes": {"app": "bot"},
        "sample_ts": NOW - timedelta(minutes=5), "created_at": NOW,
    }
    values.update(changes)
    return VerdictRecord(**values)  # type: ignore[arg-type]


def claim_one(store: VerdictStore, key: VerdictKey, owner: str, now: datetime = NOW) -> Claim:
    (claim,) = store.claim([key], owner=owner, lease_s=60, now=now)
    return claim


def test_claim_then_verdict_then_done(any_store: VerdictStore) -> None:
    assert claim_one(any_store, KEY, "a").state is ClaimState.CLAIMED
    busy = claim_one(any_store, KEY, "b", NOW + timedelta(seconds=10))
    assert busy.state is ClaimState.BUSY and busy.retry_in_s == pytest.approx(50)
    assert claim_one(any_store, KEY, "a").state is ClaimState.CLAIMED
    assert any_store.save(verdicts=[record()], owner="a") == 1
    assert claim_one(any_store, KEY, "b").state is ClaimState.DONE


def test_claims_for_a_batch_in_order(any_store: VerdictStore) -> None:
    keys = [VerdictKey(f"req-{n}", "rag_qa", "v", "m") for n in range(5)]
    any_store.save(verdicts=[record(keys[1])], owner="x")
    claim_one(any_store, keys[3], "other")
    states = [c.state for c in any_store.claim(keys, owner="a", lease_s=60, now=NOW)]
    assert states == [ClaimState.CLAIMED, ClaimState.DONE, ClaimState.CLAIMED, ClaimState.BUSY,
                      ClaimState.CLAIMED]
    assert any_store.claim([], owner="a", lease_s=60, now=NOW) == []


def test_expired_claim_can_be_taken_over(any_store: VerdictStore) -> None:
    claim_one(any_store, KEY, "a")
    later = NOW + timedelta(seconds=61)
    assert claim_one(any_store, KEY, "b", later).state is ClaimState.CLAIMED


def test_released_claim_is_free(any_store: VerdictStore) -> None:
    claim_one(any_store, KEY, "a")
    any_store.save(release=[KEY], owner="a")
    assert claim_one(any_store, KEY, "b").state is ClaimState.CLAIMED


def test_only_the_owner_releases(any_store: VerdictStore) -> None:
    claim_one(any_store, KEY, "a")
    any_store.save(release=[KEY], owner="b")
    assert claim_one(any_store, KEY, "b").state is ClaimState.BUSY


def test_one_verdict_per_key(any_store: VerdictStore) -> None:
    assert any_store.save(verdicts=[record()], owner="a") == 1
    assert any_store.save(verdicts=[record(reason="second")], owner="b") == 0
    other_model = VerdictKey(KEY.sample_id, KEY.metric, KEY.prompt_version, "judge-2")
    assert any_store.save(verdicts=[record(other_model), record(reason="third")],
                          owner="a") == 1
    stored = list(any_store.iter_verdicts())
    assert [(r.key.judge_model, r.reason) for r in stored] == [("judge-1", "fine"),
                                                               ("judge-2", "fine")]
    assert any_store.counts().verdicts == 2


@pytest.mark.parametrize("changes", [
    {},
    {"notes": ["field 'error_type' is missing"], "judge_reported_model": "judge-2026-11",
     "judge_fingerprint": "fp_abc"},
])
def test_verdict_round_trip(any_store: VerdictStore, changes: dict[str, object]) -> None:
    original = record(**changes)
    any_store.save(verdicts=[original], owner="a")
    (stored,) = any_store.iter_verdicts()
    assert stored == original


def test_export_filters(any_store: VerdictStore) -> None:
    any_store.save(verdicts=[
        record(VerdictKey(f"req-{n}", "rag_qa" if n % 2 else "bbh_match", "v", "m"),
               created_at=NOW + timedelta(minutes=n))
        for n in range(5)], owner="a")
    assert [r.key.sample_id for r in any_store.iter_verdicts(metric="rag_qa")] == ["req-1",
                                                                                   "req-3"]
    since = [r.key.sample_id for r in any_store.iter_verdicts(since=NOW + timedelta(minutes=3))]
    assert since == ["req-3", "req-4"]
    until = [r.key.sample_id for r in any_store.iter_verdicts(until=NOW + timedelta(minutes=1))]
    assert until == ["req-0"]


def test_dead_letter_drops_the_claim(any_store: VerdictStore) -> None:
    claim_one(any_store, KEY, "a")
    letter = DeadLetter(sample_id="req-1", metric="rag_qa", error_class="judge_rejected",
                        error="404", attempts=1, payload={"v": 1}, created_at=NOW)
    any_store.save(dead_letters=[letter], release=[KEY], owner="a")
    assert list(any_store.iter_dead_letters()) == [letter]
    assert claim_one(any_store, KEY, "b").state is ClaimState.CLAIMED
    assert any_store.counts().dead_letters == 1


def test_a_dead_letter_settles_its_key_once(any_store: VerdictStore) -> None:
    # A second copy of the job (redelivered while the first was being judged) must
    # neither judge again nor add a second dead letter.
    letter = DeadLetter(sample_id="req-1", metric="rag_qa", error_class="judge_unavailable",
                        error="gave up", attempts=2, payload={"v": 1}, created_at=NOW,
                        verdict_key=KEY.digest())
    claim_one(any_store, KEY, "a")
    any_store.save(dead_letters=[letter], release=[KEY], owner="a")
    assert claim_one(any_store, KEY, "b").state is ClaimState.DONE
    any_store.save(dead_letters=[letter], release=[KEY], owner="b")
    assert list(any_store.iter_dead_letters()) == [letter]
    other = VerdictKey("req-2", "rag_qa", "abc123", "judge-1")
    states = [c.state for c in any_store.claim([KEY, other], owner="c", lease_s=60, now=NOW)]
    assert states == [ClaimState.DONE, ClaimState.CLAIMED]


def test_daily_costs(any_store: VerdictStore) -> None:
    day_one, day_two = NOW - timedelta(days=1), NOW
    any_store.save(verdicts=[
        record(VerdictKey("a", "rag_qa", "v", "m"), created_at=day_one, cost_usd=0.002,
               cached_tokens=60),
        record(VerdictKey("b", "rag_qa", "v", "m"), created_at=day_one, cost_usd=0.003),
        record(VerdictKey("c", "rag_qa", "v", "m"), created_at=day_two, cost_usd=None),
        record(VerdictKey("d", "bbh_match", "v", "m"), created_at=day_two, cost_usd=0.01),
    ], owner="a")
    rows = any_store.daily_costs(since=NOW - timedelta(days=7))
    assert [(r.day.isoformat(), r.metric, r.verdicts, r.prompt_tokens) for r in rows] == [
        ("2026-11-21", "rag_qa", 2, 200), ("2026-11-22", "bbh_match", 1, 100),
        ("2026-11-22", "rag_qa", 1, 100)]
    assert [r.cost_usd for r in rows] == pytest.approx([0.005, 0.01, 0.0])
    assert [r.cached_tokens for r in rows] == [60, 0, 0]  # none reported counts as none
    assert any_store.daily_costs(since=NOW) == rows[1:]


def test_only_real_scores_are_aggregated(store: VerdictStore) -> None:
    store.save(verdicts=[record()], owner="a")
    with store.engine.connect() as conn:  # type: ignore[attr-defined]
        rows = conn.exec_driver_sql(
            "SELECT name, value FROM verdict_scores ORDER BY name").all()
    assert [tuple(row) for row in rows] == [("faithfulness", 0.75)]


@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
def test_migrations_match_the_schema(backend: str, request: pytest.FixtureRequest,
                                     tmp_path: Path) -> None:
    if backend == "postgres":
        url = request.getfixturevalue("database_url")
    else:
        url = f"sqlite:///{tmp_path / 'schema.db'}"
    store = open_store(url)
    migrate(store.engine)
    with store.engine.connect() as conn:  # type: ignore[attr-defined]
        context = MigrationContext.configure(conn, opts=schema_filter(conn.dialect.name))
        diff = compare_metadata(context, metadata)
    store.close()
    assert diff == []


def test_a_batch_keeps_hostile_text_its_times_and_only_new_scores(any_store: SqlStore) -> None:
    hostile = "'); DROP TABLE verdicts; -- :rows %(rows)s {x} {{ y }} <score>5</score> \u2028 é"
    first = [record(VerdictKey(f"s-{n}", "rag_qa", "v1", "m"), reason=hostile,
                    raw_output=hostile, attributes={"app": hostile},
                    scores={"faithfulness": 0.25 * n, "correct": None})
             for n in range(3)]
    assert any_store.save(verdicts=first[:2], owner="a") == 2
    assert any_store.save(verdicts=first, owner="a") == 1  # two were stored already
    stored = {r.key.sample_id: r for r in any_store.iter_verdicts()}
    assert sorted(stored) == ["s-0", "s-1", "s-2"]
    for original in first:
        again = stored[original.key.sample_id]
        assert (again.reason, again.raw_output, again.attributes) == (
            hostile, hostile, {"app": hostile})
        assert (again.sample_ts, again.created_at) == (original.sample_ts, original.created_at)
        assert again.scores == original.scores
    with any_store.engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT name, value FROM verdict_scores "
                                    "ORDER BY value").all()
    assert [tuple(row) for row in rows] == [("faithfulness", 0.0), ("faithfulness", 0.25),
                                            ("faithfulness", 0.5)]


def test_claims_of_hostile_keys_in_one_batch(any_store: SqlStore) -> None:
    keys = [VerdictKey(f"'\"); -- :keys {n} \\u0041 é", "rag_qa", "v1", "m") for n in range(3)]
    states = [c.state for c in any_store.claim(keys, owner="a", lease_s=60, now=NOW)]
    assert states == [ClaimState.CLAIMED] * 3
    any_store.save(verdicts=[record(keys[0])], owner="a")
    again = any_store.claim(keys, owner="b", lease_s=60, now=NOW + timedelta(seconds=20))
    assert [c.state for c in again] == [ClaimState.DONE, ClaimState.BUSY, ClaimState.BUSY]
    assert again[1].retry_in_s == pytest.approx(40)


def test_judge_identities_group_what_the_judge_reported(any_store: VerdictStore) -> None:
    any_store.save(verdicts=[
        record(VerdictKey("a", "rag_qa", "v", "m"), created_at=NOW, judge_fingerprint="fp_1",
               judge_reported_model="m-1"),
        record(VerdictKey("b", "rag_qa", "v", "m"), created_at=NOW + timedelta(minutes=1),
               judge_fingerprint="fp_1", judge_reported_model="m-1"),
        record(VerdictKey("c", "bbh_match", "v", "m"), created_at=NOW + timedelta(minutes=2),
               judge_fingerprint="fp_2", judge_reported_model="m-1"),
        record(VerdictKey("d", "rag_qa", "v", "m"), created_at=NOW),  # reported nothing
        record(VerdictKey("e", "rag_qa", "v", "m"), created_at=NOW - timedelta(days=2),
               judge_fingerprint="fp_0"),
    ], owner="a")
    identities = any_store.judge_identities(since=NOW - timedelta(hours=1))
    assert [(i.judge_model, i.reported_model, i.fingerprint, i.verdicts, i.first_at, i.last_at)
            for i in identities] == [
        ("m", "m-1", "fp_1", 2, NOW, NOW + timedelta(minutes=1)),
        ("m", "m-1", "fp_2", 1, NOW + timedelta(minutes=2), NOW + timedelta(minutes=2)),
    ]


def test_canary_verdicts_add_their_agreement_series_only(any_store: SqlStore) -> None:
    canary = record(VerdictKey("canary:7:gold-1", "rag_qa", "v", "m"), purpose="canary",
                    canary_scores={"canary:faithfulness": 0.75, "canary_bias:faithfulness": -0.25})
    calibration = record(VerdictKey("calibration:1:gold-1", "rag_qa", "v", "m"),
                         purpose="calibration", canary_scores={"canary:faithfulness": 1.0})
    failed = record(VerdictKey("canary:7:gold-2", "rag_qa", "v", "m"), purpose="canary",
                    status="failed", scores={"faithfulness": None}, raw_scores={})
    assert any_store.save(verdicts=[canary, calibration, failed], owner="a") == 3
    assert any_store.save(verdicts=[canary], owner="a") == 0  # a slot sent twice
    with any_store.engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT name, metric, value FROM verdict_scores "
                                    "ORDER BY name").all()
    assert [tuple(row) for row in rows] == [("canary:faithfulness", "rag_qa", 0.75),
                                            ("canary_bias:faithfulness", "rag_qa", -0.25)]


def test_cached_tokens_are_stored_and_exported(any_store: VerdictStore) -> None:
    any_store.save(verdicts=[record(VerdictKey("a", "rag_qa", "v", "m"), cached_tokens=64),
                             record(VerdictKey("b", "rag_qa", "v", "m"))], owner="a")
    rows = {r.key.sample_id: export_row(r) for r in any_store.iter_verdicts()}
    assert (rows["a"]["cached_tokens"], rows["b"]["cached_tokens"]) == (64, None)
    assert rows["a"]["prompt_tokens"] == 100


@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
@pytest.mark.parametrize(("before", "column", "kept", "new"), [
    ("0012", "cached_tokens", 80, 32),  # revision 0013
    ("0016", "failed_step", 5, 3),  # revision 0017
])
def test_a_revision_adds_a_verdict_column_and_takes_it_back(
        backend: str, before: str, column: str, kept: int, new: int,
        request: pytest.FixtureRequest, tmp_path: Path) -> None:
    # On Postgres the verdicts are partitioned by day (0008): the column reaches every
    # partition, those of verdicts stored before the revision included.
    url = (request.getfixturevalue("empty_postgres_url") if backend == "postgres"
           else f"sqlite:///{tmp_path / 'revisions.db'}")
    store = open_store(url)
    try:
        migrate(store.engine)
        store.save(verdicts=[record(VerdictKey("kept", "rag_qa", "v", "m"), **{column: kept})],
                   owner="a")
        migrate_down(store, before)
        with store.engine.connect() as conn:  # type: ignore[attr-defined]
            columns = {c["name"] for c in inspect(conn).get_columns("verdicts")}
            assert column not in columns and "judge_mode" in columns
        migrate(store.engine)
        store.save(verdicts=[record(VerdictKey("new", "rag_qa", "v", "m"), **{column: new},
                                    created_at=NOW + timedelta(days=1))], owner="a")
        values = {r.key.sample_id: getattr(r, column) for r in store.iter_verdicts()}
    finally:
        store.close()
    assert values == {"kept": None, "new": new}  # the older row lost it with the column


def migrate_down(store: VerdictStore, revision: str) -> None:
    engine = store.engine  # type: ignore[attr-defined]
    config = alembic_config(engine)
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, revision)


@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
def test_revision_0016_gives_review_items_their_samples_time(
        backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    # Items queued before the revision take their verdict's sample time (on Postgres
    # through verdict_keys to the verdict's partition); an item whose verdict is gone
    # takes its queue time.
    from sqlalchemy import delete, select

    from evalfleet.core.review_slice import MetricSlice, ReviewSlice
    from evalfleet.store.schema import review_items, verdicts

    url = (request.getfixturevalue("empty_postgres_url") if backend == "postgres"
           else f"sqlite:///{tmp_path / 'revisions.db'}")
    store = open_store(url, review=ReviewSlice({"rag_qa": MetricSlice(rate=1.0)}))
    taken = NOW - timedelta(days=3)
    try:
        migrate(store.engine)
        store.save(verdicts=[record(VerdictKey(name, "rag_qa", "v", "m"), sample_ts=taken,
                                    created_at=NOW) for name in ("kept", "purged")], owner="a")
        migrate_down(store, "0015")
        with store.engine.begin() as conn:  # type: ignore[attr-defined]
            assert "sample_ts" not in {c["name"] for c in inspect(conn).get_columns(
                "review_items")}
            conn.execute(delete(verdicts).where(verdicts.c.sample_id == "purged"))
        migrate(store.engine)
        with store.engine.connect() as conn:  # type: ignore[attr-defined]
            found = dict(conn.execute(select(review_items.c.sample_id,
                                             review_items.c.sample_ts)).all())
    finally:
        store.close()
    assert {k: v.astimezone(UTC) if v.tzinfo else v.replace(tzinfo=UTC)
            for k, v in found.items()} == {"kept": taken, "purged": NOW}
