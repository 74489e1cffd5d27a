"""Drift canaries: the rotating slice, deterministic ids, and gold sets that are missing or bad."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from evalfleet.calibration.canary import (
    CanaryFeeder,
    canary_id,
    canary_jobs,
    canary_slice,
    canary_slot,
)
from evalfleet.core.gold import GoldItem, bundled_gold
from evalfleet.core.message import Job, decode_batch, encode_batch
from evalfleet.core.sample import MAX_ID_LENGTH, Sample
from evalfleet.core.settings import Settings

T0 = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def items(n: int) -> list[GoldItem]:
    return [GoldItem(Sample(id=f"g{i}"), {"faithfulness": 1.0}) for i in range(n)]


@pytest.mark.parametrize(("n", "slot", "size", "expected"), [
    (10, 0, 4, ["g0", "g1", "g2", "g3"]),
    (10, 1, 4, ["g4", "g5", "g6", "g7"]),
    (10, 2, 4, ["g8", "g9", "g0", "g1"]),  # wraps round
    (3, 5, 4, ["g2", "g0", "g1"]),  # never one item twice in a slot
    (0, 5, 4, []),  # an empty gold set feeds nothing
])
def test_each_slot_takes_the_next_items(n: int, slot: int, size: int,
                                        expected: list[str]) -> None:
    assert [item.sample.id for item in canary_slice(items(n), slot=slot, size=size)] == expected


def test_every_item_is_fed_once_per_rotation() -> None:
    gold = items(24)
    fed = [item.sample.id for slot in range(6) for item in canary_slice(gold, slot=slot, size=4)]
    assert sorted(fed) == sorted(item.sample.id for item in gold)


def test_a_slot_is_a_fixed_set_of_jobs_with_labels() -> None:
    slot = canary_slot(T0 + timedelta(seconds=299), interval_s=300)
    assert slot == canary_slot(T0, interval_s=300) == canary_slot(T0, interval_s=300.0)
    first, again = (canary_jobs("rag_qa", items(2), slot=slot, interval_s=300) for _ in range(2))
    assert [job.sample.id for job in first] == [f"canary:{slot}:g0", f"canary:{slot}:g1"]
    assert [(j.sample.id, j.sample.timestamp) for j in first] == [
        (j.sample.id, j.sample.timestamp) for j in again]
    assert first[0].sample.timestamp == T0  # the slot's start
    (decoded,) = decode_batch(json.loads(json.dumps(encode_batch(first[:1]))))
    assert (decoded.purpose, decoded.labels) == ("canary", {"faithfulness": 1.0})


def test_a_gold_id_too_long_for_a_canary_id_goes_by_its_digest() -> None:
    long_item = GoldItem(Sample(id="g" * MAX_ID_LENGTH), {"faithfulness": 1.0})
    (job,) = canary_jobs("rag_qa", [long_item], slot=897805322, interval_s=2)
    assert len(job.sample.id) <= MAX_ID_LENGTH
    assert job.sample.id.startswith("canary:897805322:sha256-")
    assert canary_id(897805322, "g-1") == "canary:897805322:g-1"


def feeder(tmp_path: Path, **settings: object) -> tuple[CanaryFeeder, list[Job]]:
    sent: list[Job] = []
    config = Settings(data_dir=tmp_path, canary_interval_s=300, canary_samples=3,
                      **settings)  # type: ignore[arg-type]
    return CanaryFeeder(config, send=sent.extend), sent


def test_the_shipped_gold_sets_feed_every_built_in_metric(tmp_path: Path) -> None:
    canaries, sent = feeder(tmp_path)
    report = canaries.feed(T0)
    assert report.sent == {"bbh_match": 3, "context_precision": 3, "rag_qa": 3,
                           "rec_faithfulness": 3, "agent_task_completion": 3,
                           "agent_tool_use": 3, "conversation_goal_completion": 3,
                           "conversation_faithfulness": 3, "user_frustration": 3}
    assert not report.skipped
    assert all(job.purpose == "canary" and job.labels for job in sent)
    assert len({job.sample.id for job in sent}) == 27


def test_missing_empty_and_bad_gold_sets_are_skipped_with_the_reason(tmp_path: Path) -> None:
    gold = tmp_path / "gold"
    gold.mkdir()
    shutil.copy(bundled_gold("rag_qa"), gold / "rag_qa.jsonl")
    (gold / "bbh_match.jsonl").write_text("")
    (gold / "context_precision.jsonl").write_text('{"id": "x", "labels": {"nope": 1}}\nnot json\n')
    canaries, sent = feeder(tmp_path, canary_gold_dir=gold)
    report = canaries.feed(T0)
    assert report.sent == {"rag_qa": 3}
    assert report.skipped["rec_faithfulness"] == "no gold set"
    assert report.skipped["bbh_match"].startswith("no usable record")
    assert report.skipped["context_precision"].startswith("no usable record")
    assert {job.metric for job in sent} == {"rag_qa"}
