"""What a worker did: messages started and finished, paused queues, shutdown."""

from __future__ import annotations

from workers.health.activity import WorkerActivity


def test_the_activity_counts_messages_pauses_and_shutdown() -> None:
    now = [100.0]
    tracker = WorkerActivity(clock=lambda: now[0])
    now[0] = 110.0
    tracker.consuming()
    now[0] = 120.0
    tracker.started()
    tracker.started()
    now[0] = 125.0
    tracker.finished()
    tracker.pause("eval.rag_qa", for_s=10)
    snapshot = tracker.snapshot()
    assert (snapshot.since_s, snapshot.last_started_s, snapshot.last_finished_s) == (110, 120, 125)
    assert snapshot.running == 1 and snapshot.last_progress_s() == 125
    assert snapshot.paused == {"eval.rag_qa"} and not snapshot.draining
    now[0] = 135.0
    tracker.drain()
    snapshot = tracker.snapshot()
    assert snapshot.paused == frozenset() and snapshot.draining
