"""Liveness decisions: work waiting and nothing happening, and everything that is not that."""

from __future__ import annotations

import pytest

from workers.health.activity import ActivitySnapshot
from workers.health.liveness import assess_liveness, needs_depths

STALL_S = 180.0


def activity(*, since_s: float = 0.0, started_s: float | None = None,
             finished_s: float | None = None, running: int = 0,
             paused: frozenset[str] = frozenset(), draining: bool = False) -> ActivitySnapshot:
    started = 0 if started_s is None else 10 + running
    return ActivitySnapshot(since_s=since_s, last_started_s=started_s,
                            last_finished_s=finished_s, started=started,
                            finished=started - running, paused=paused, draining=draining)


@pytest.mark.parametrize(("snapshot", "now_s", "depths", "live", "reason"), [
    # Recent progress: live without looking at the queues.
    (activity(started_s=100), 200, None, True, "last progress 100 s ago"),
    (activity(started_s=10, finished_s=150), 300, None, True, "last progress 150 s ago"),
    (activity(since_s=500), 600, None, True, "last progress 100 s ago"),
    # No progress for longer than the limit, but no work waits.
    (activity(started_s=0), 1000, {"eval.rag_qa": 0}, True, "no work waiting"),
    (activity(), 1000, {}, True, "no work waiting"),
    # Work waits and nothing happens: idle consumer, or every slot stuck.
    (activity(), 1000, {"eval.rag_qa": 3}, False, "messages wait in eval.rag_qa (3)"),
    (activity(started_s=10, running=4), 1000, {"eval.rag_qa": 1, "eval.bbh_match": 0}, False,
     "4 running"),
    (activity(started_s=0), STALL_S, {"eval.rag_qa": 1}, False, "limit 180 s"),
    # Paused on purpose (the judge refuses access): waiting work there is no stall.
    (activity(paused=frozenset({"eval.rag_qa"})), 1000, {"eval.rag_qa": 9}, True,
     "no work waiting"),
    (activity(paused=frozenset({"eval.rag_qa"})), 1000, {"eval.rag_qa": 9, "eval.tone": 2},
     False, "eval.tone (2)"),
    # Shutting down, or the broker cannot say: never restart for that.
    (activity(draining=True), 1000, {"eval.rag_qa": 9}, True, "shutting down"),
    (activity(), 1000, None, True, "queue depths unknown"),
])
def test_liveness(snapshot: ActivitySnapshot, now_s: float, depths: dict[str, int] | None,
                  live: bool, reason: str) -> None:
    liveness = assess_liveness(snapshot, now_s=now_s, stall_s=STALL_S, depths=depths)
    assert liveness.live is live
    assert reason in liveness.reason


@pytest.mark.parametrize(("snapshot", "now_s", "needed"), [
    (activity(started_s=100), 200, False),
    (activity(started_s=100), 100 + STALL_S, True),
    (activity(finished_s=500), 600, False),
    (activity(draining=True), 10_000, False),
])
def test_depths_are_read_only_when_they_decide(snapshot: ActivitySnapshot, now_s: float,
                                               needed: bool) -> None:
    assert needs_depths(snapshot, now_s=now_s, stall_s=STALL_S) is needed

