"""The verdict store on both backends: claims, exactly-once verdicts, dead letters, export."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from workers.store import (
    ClaimState,
    DeadLetter,
    SqliteStore,
    VerdictKey,
    VerdictRecord,
    VerdictStore,
    migrate,
    open_store,
)
from workers.store.schema import metadata

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
KEY = VerdictKey("req-1", "rag_qa", "abc123", "judge-1")


@pytest.fixture(params=["postgres", "sqlite"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VerdictStore]:
    """Each test runs against Postgres and against the embedded SQLite store."""
    if request.param == "postgres":
        yield request.getfixturevalue("store")
        return
    store = SqliteStore(f"sqlite:///{tmp_path / 'verdicts.db'}")
    migrate(store.engine)
    yield store
    store.close()


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


def test_claim_then_verdict_then_done(any_store: VerdictStore) -> None:
    assert any_store.claim(KEY, owner="a", lease_s=60, now=NOW).state is ClaimState.CLAIMED
    busy = any_store.claim(KEY, owner="b", lease_s=60, now=NOW + timedelta(seconds=10))
    assert busy.state is ClaimState.BUSY and busy.retry_in_s == pytest.approx(50)
    assert any_store.claim(KEY, owner="a", lease_s=60, now=NOW).state is ClaimState.CLAIMED
    assert any_store.save_verdict(record(), owner="a") is True
    assert any_store.claim(KEY, owner="b", lease_s=60, now=NOW).state is ClaimState.DONE


def test_expired_claim_can_be_taken_over(any_store: VerdictStore) -> None:
    any_store.claim(KEY, owner="a", lease_s=60, now=NOW)
    later = NOW + timedelta(seconds=61)
    assert any_store.claim(KEY, owner="b", lease_s=60, now=later).state is ClaimState.CLAIMED


def test_released_claim_is_free(any_store: VerdictStore) -> None:
    any_store.claim(KEY, owner="a", lease_s=60, now=NOW)
    any_store.release(KEY, owner="a")
    assert any_store.claim(KEY, owner="b", lease_s=60, now=NOW).state is ClaimState.CLAIMED


def test_one_verdict_per_key(any_store: VerdictStore) -> None:
    assert any_store.save_verdict(record(), owner="a") is True
    assert any_store.save_verdict(record(reason="second"), owner="b") is False
    other_model = VerdictKey(KEY.sample_id, KEY.metric, KEY.prompt_version, "judge-2")
    assert any_store.save_verdict(record(other_model), owner="a") is True
    stored = list(any_store.iter_verdicts())
    assert [(r.key.judge_model, r.reason) for r in stored] == [("judge-1", "fine"),
                                                               ("judge-2", "fine")]
    assert any_store.counts().verdicts == 2


def test_verdict_round_trip(any_store: VerdictStore) -> None:
    original = record()
    any_store.save_verdict(original, owner="a")
    (stored,) = any_store.iter_verdicts()
    assert stored == original


def test_export_filters(any_store: VerdictStore) -> None:
    for n in range(5):
        key = VerdictKey(f"req-{n}", "rag_qa" if n % 2 else "bbh_match", "v", "m")
        any_store.save_verdict(record(key, created_at=NOW + timedelta(minutes=n)), owner="a")
    assert [r.key.sample_id for r in any_store.iter_verdicts(metric="rag_qa")] == ["req-1",
                                                                                   "req-3"]
    since = [r.key.sample_id for r in any_store.iter_verdicts(since=NOW + timedelta(minutes=3))]
    assert since == ["req-3", "req-4"]
    until = [r.key.sample_id for r in any_store.iter_verdicts(until=NOW + timedelta(minutes=1))]
    assert until == ["req-0"]


def test_dead_letter_drops_the_claim(any_store: VerdictStore) -> None:
    any_store.claim(KEY, owner="a", lease_s=60, now=NOW)
    letter = DeadLetter(sample_id="req-1", metric="rag_qa", error_class="judge_rejected",
                        error="404", attempts=1, payload={"v": 1}, created_at=NOW)
    any_store.save_dead_letter(letter, key=KEY, owner="a")
    assert list(any_store.iter_dead_letters()) == [letter]
    assert any_store.claim(KEY, owner="b", lease_s=60, now=NOW).state is ClaimState.CLAIMED
    assert any_store.counts().dead_letters == 1


def test_only_real_scores_are_aggregated(store: VerdictStore) -> None:
    store.save_verdict(record(), owner="a")
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
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    store.close()
    assert diff == []
